"""os_images (cloud_images): checksums, the difference function and the exact SDK calls of a run (SDK mocked)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from unittest import mock

import pytest
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.cloud import images as cloud_images

DATA = b"raw image data " * 1000
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "disk.raw"
    path.write_bytes(DATA)
    return str(path)


def raw(name, sha=SHA, iid=None, **extra):
    body = {"id": iid or name + "-id", "name": name, "status": "active", "visibility": "public", "min_disk": 0,
            "min_ram": 0, "owner_specified.openstack.sha256": sha, "created_at": "2026-01-01T00:00:00Z"}
    body.update(extra)
    return body


def listing(conn, *images):
    response = mock.Mock(status_code=200)
    response.json.return_value = {"images": list(images)}
    conn.image.get.return_value = response


def test_parse_checksum():
    assert cloud_images.parse_checksum("sha256:" + SHA.upper()) == ("sha256", SHA)
    assert cloud_images.parse_checksum(SHA) == ("sha256", SHA)
    assert cloud_images.parse_checksum("md5:" + "a" * 32) == ("md5", "a" * 32)
    with pytest.raises(ValueError, match="has 3 hex digits; sha256 needs 64"):
        cloud_images.parse_checksum("sha256:abc")
    with pytest.raises(ValueError, match="is not ALGORITHM:HEX"):
        cloud_images.parse_checksum("crc32:abcd")


def test_validate_reports_every_problem(tmp_path):
    base = dict(file=None, url=None, checksum=None, min_disk=0, min_ram=0)
    errors = cloud_images.validate([
        dict(base, name="a"),
        dict(base, name="b", file=str(tmp_path / "missing.qcow2")),
        dict(base, name="c", url="ftp://x/y"),
        dict(base, name="c", url="https://x/y", checksum="sha256:zz", min_ram=-1),
    ])
    assert errors == [
        "images[0] (a): give exactly one of file and url",
        f"images[1] (b): file {tmp_path / 'missing.qcow2'} does not exist",
        "images[2] (c): a url image needs a checksum (sha256:HEX), so that re-runs need not download it",
        "images[2] (c): url 'ftp://x/y' must be http:// or https://",
        "images[3] (c): name declared twice",
        "images[3] (c): checksum 'sha256:zz' is not ALGORITHM:HEX (sha256, sha512 or md5)",
        "images[3] (c): min_ram must be >= 0",
    ]


def test_plan_image():
    image = dict(visibility="public", min_disk=0, min_ram=0, properties={"hw_machine_type": "q35"})
    have = cloud_images.image_view(raw("x", hw_machine_type="q35"))
    assert cloud_images.plan_image(image, None, SHA) == ("create", {})
    assert cloud_images.plan_image(image, have, "other") == ("replace", {})
    assert cloud_images.plan_image(image, have, SHA) == ("unchanged", {})
    assert cloud_images.plan_image(dict(image, visibility="private", properties={"hw_machine_type": "pc"}), have,
                                SHA) == ("update", {"visibility": "private", "hw_machine_type": "pc"})


ARGS = dict(cloud="ogc-test", images=[dict(name="ubuntu", file=None, disk_format="raw",
                                           properties={"hw_machine_type": "q35"})])


def args_for(path, **extra):
    image = dict(ARGS["images"][0], file=path)
    image.update(extra)
    return dict(ARGS, images=[image])


def test_new_image_is_uploaded_and_waited_for(os_images, conn, run_module, image_file):
    listing(conn)
    conn.image.create_image.return_value = SimpleNamespace(id="new-id")
    conn.image.get_image.return_value = SimpleNamespace(id="new-id", status="active", hash_algo="sha256",
                                                        hash_value=SHA)
    result = run_module(os_images, args_for(image_file))
    assert result["changed"] is True and result["created"] == ["ubuntu"]
    conn.image.create_image.assert_called_once_with(
        "ubuntu", filename=image_file, md5=hashlib.md5(DATA).hexdigest(), sha256=SHA, disk_format="raw",
        container_format="bare", allow_duplicates=True, meta={"hw_machine_type": "q35"}, wait=False, timeout=900,
        visibility="public", min_disk=0, min_ram=0)
    conn.image.update_image.assert_not_called()
    assert result["images"] == {"ubuntu": {"id": "new-id", "sha256": SHA}}


def test_same_content_is_unchanged_and_uploads_nothing(os_images, conn, run_module, image_file):
    listing(conn, raw("ubuntu", hw_machine_type="q35"))
    result = run_module(os_images, args_for(image_file))
    assert result["changed"] is False and result["unchanged"] == ["ubuntu"]
    conn.image.create_image.assert_not_called()
    conn.image.update_image.assert_not_called()


def test_new_checksum_uploads_then_retires_the_old_image(os_images, conn, run_module, image_file):
    listing(conn, raw("ubuntu", sha="0" * 64, iid="old-id", hw_machine_type="q35"))
    conn.image.create_image.return_value = SimpleNamespace(id="new-id")
    conn.image.get_image.return_value = SimpleNamespace(id="new-id", status="active", hash_algo=None, hash_value=None)
    result = run_module(os_images, args_for(image_file))
    assert result["replaced"] == ["ubuntu"]
    assert result["retired"][0].startswith("ubuntu (retired ") and result["retired"][0].endswith(" 000000000000)")
    names = [c[0] for c in conn.image.method_calls if c[0] in ("create_image", "get_image", "update_image")]
    assert names == ["create_image", "get_image", "update_image"]  # retire only after the new one is active
    conn.image.update_image.assert_called_once_with("old-id", name=result["retired"][0], is_hidden=True)
    conn.image.delete_image.assert_not_called()


def test_property_change_is_made_in_place(os_images, conn, run_module, image_file):
    listing(conn, raw("ubuntu", hw_machine_type="pc"))
    result = run_module(os_images, args_for(image_file), diff=True)
    assert result["updated"] == ["ubuntu"]
    conn.image.update_image.assert_called_once_with("ubuntu-id", hw_machine_type="q35")
    assert result["diff"] == {"before": {"ubuntu": {"hw_machine_type": "pc"}},
                              "after": {"ubuntu": {"hw_machine_type": "q35"}}}


def test_check_mode_writes_nothing(os_images, conn, run_module, image_file):
    listing(conn, raw("ubuntu", sha="0" * 64))
    result = run_module(os_images, args_for(image_file), check_mode=True)
    assert result["changed"] is True and result["replaced"] == ["ubuntu"]
    conn.image.create_image.assert_not_called()
    conn.image.update_image.assert_not_called()


def test_checksum_mismatch_fails_before_connecting(os_images, conn, run_module, image_file):
    result = run_module(os_images, args_for(image_file, checksum="sha256:" + "1" * 64))
    assert result["failed"] is True
    assert result["msg"] == (f"image ubuntu: checksum mismatch for {image_file}: the data has sha256 {SHA}, the "
                             f"declared checksum is {'1' * 64}; nothing was uploaded")
    conn.connect_mock.assert_not_called()


def test_missing_file_fails_before_connecting(os_images, conn, run_module, tmp_path):
    result = run_module(os_images, args_for(str(tmp_path / "nope.raw")))
    assert result["msg"] == ("invalid image declaration, nothing was written: images[0] (ubuntu): file "
                             f"{tmp_path / 'nope.raw'} does not exist")
    conn.connect_mock.assert_not_called()


def test_url_image_with_matching_declared_checksum_is_not_downloaded(os_images, conn, run_module):
    listing(conn, raw("ubuntu", hw_machine_type="q35"))
    args = dict(ARGS, images=[dict(ARGS["images"][0], url="http://127.0.0.1:9/disk.raw", checksum="sha256:" + SHA)])
    with mock.patch.object(cloud_images, "open_url") as fetch:
        result = run_module(os_images, args)
    assert result["changed"] is False
    fetch.assert_not_called()


def test_new_url_image_is_downloaded_verified_and_uploaded(os_images, conn, run_module):
    listing(conn)
    conn.image.create_image.return_value = SimpleNamespace(id="new-id")
    conn.image.get_image.return_value = SimpleNamespace(id="new-id", status="active", hash_algo=None, hash_value=None)
    args = dict(ARGS, images=[dict(ARGS["images"][0], url="http://127.0.0.1:9/disk.raw", checksum="sha256:" + SHA)])
    import io  # pylint: disable=import-outside-toplevel

    with mock.patch.object(cloud_images, "open_url", return_value=io.BytesIO(DATA)) as fetch:
        result = run_module(os_images, args)
    assert result["created"] == ["ubuntu"]
    fetch.assert_called_once_with("http://127.0.0.1:9/disk.raw", timeout=900)
    assert conn.image.create_image.call_args.kwargs["sha256"] == SHA


def test_url_data_not_matching_the_checksum_is_not_uploaded(os_images, conn, run_module):
    listing(conn)
    args = dict(ARGS, images=[dict(ARGS["images"][0], url="http://127.0.0.1:9/disk.raw", checksum="sha256:" + "2" * 64)])
    import io  # pylint: disable=import-outside-toplevel

    with mock.patch.object(cloud_images, "open_url", return_value=io.BytesIO(DATA)):
        result = run_module(os_images, args)
    assert result["msg"] == ("image ubuntu: checksum mismatch for http://127.0.0.1:9/disk.raw: the data has sha256 "
                             f"{SHA}, the declared checksum is {'2' * 64}; nothing was uploaded")
    conn.image.create_image.assert_not_called()


SHA512 = hashlib.sha512(DATA).hexdigest()


def url_args(checksum):
    return dict(ARGS, images=[dict(ARGS["images"][0], url="http://127.0.0.1:9/disk.raw", checksum=checksum)])


def test_url_declared_by_sha512_is_planned_as_replace_but_same_content_is_only_updated(os_images, conn, run_module):
    # Only the download tells a sha512-declared URL's SHA-256: check mode plans a replacement, the real run
    # finds the content unchanged and updates the property in place, and reports (and diffs) that.
    listing(conn, raw("ubuntu", hw_machine_type="pc"))
    import io  # pylint: disable=import-outside-toplevel

    check = run_module(os_images, url_args("sha512:" + SHA512), check_mode=True, diff=True)
    assert check["changed"] is True and check["replaced"] == ["ubuntu"]
    assert check["diff"]["after"] == {"ubuntu": {"sha256": None, "visibility": "public"}}
    with mock.patch.object(cloud_images, "open_url", return_value=io.BytesIO(DATA)) as fetch:
        result = run_module(os_images, url_args("sha512:" + SHA512), diff=True)
    fetch.assert_called_once()
    assert result["changed"] is True and result["updated"] == ["ubuntu"] and result["replaced"] == []
    assert result["diff"] == {"before": {"ubuntu": {"hw_machine_type": "pc"}},
                              "after": {"ubuntu": {"hw_machine_type": "q35"}}}
    conn.image.update_image.assert_called_once_with("ubuntu-id", hw_machine_type="q35")
    conn.image.create_image.assert_not_called()
    assert result["images"] == {"ubuntu": {"id": "ubuntu-id", "sha256": SHA}}


def test_url_declared_by_md5_with_same_content_and_properties_is_unchanged(os_images, conn, run_module):
    listing(conn, raw("ubuntu", hw_machine_type="q35"))
    import io  # pylint: disable=import-outside-toplevel

    with mock.patch.object(cloud_images, "open_url", return_value=io.BytesIO(DATA)):
        result = run_module(os_images, url_args("md5:" + hashlib.md5(DATA).hexdigest()), diff=True)
    assert result["changed"] is False and result["unchanged"] == ["ubuntu"]
    assert result["diff"] == {"before": {}, "after": {}}
    conn.image.update_image.assert_not_called()
    conn.image.create_image.assert_not_called()


def test_check_mode_reports_what_the_real_run_does(os_images, conn, run_module, image_file, tmp_path):
    other = tmp_path / "other.raw"
    other.write_bytes(b"other data")
    listing(conn, raw("ubuntu", sha="0" * 64, iid="old-id", hw_machine_type="q35"),
            raw("fedora", sha=hashlib.sha256(b"other data").hexdigest(), hw_machine_type="pc"))
    conn.image.create_image.return_value = SimpleNamespace(id="new-id")
    conn.image.get_image.return_value = SimpleNamespace(id="new-id", status="active", hash_algo=None, hash_value=None)
    args = dict(ARGS, images=[dict(ARGS["images"][0], file=image_file),
                              dict(ARGS["images"][0], name="fedora", file=str(other)),
                              dict(ARGS["images"][0], name="debian", file=str(other))])
    check = run_module(os_images, args, check_mode=True, diff=True)
    assert conn.image.create_image.call_count == conn.image.update_image.call_count == 0
    real = run_module(os_images, args, diff=True)
    for key in ("changed", "created", "replaced", "updated", "unchanged", "diff"):
        assert check[key] == real[key], key
    assert check["replaced"] == ["ubuntu"] and check["updated"] == ["fedora"] and check["created"] == ["debian"]
    assert check["retired"] == [] and len(real["retired"]) == 1  # the retired name is chosen when retiring
    assert check["images"]["debian"] == {"id": None, "sha256": hashlib.sha256(b"other data").hexdigest()}
    assert real["images"]["debian"]["id"] == "new-id"
