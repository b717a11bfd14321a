"""plugins/module_utils/common/redact.py: credentials on kernel lines masked wherever they are stored or shown, and a known secret
masked as a token (never as a substring)."""

import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.host import kernel_cmdline as kc
from ansible_collections.open_gpu_cloud.toolkit.plugins.module_utils.common import redact

MASK = redact.MASK


@pytest.mark.parametrize("line, shown", [
    ("netroot=iscsi:ogc:Zq8x@10.0.0.5::3260::iqn.2026-01.example:gpu",
     "netroot=iscsi:ogc:********@10.0.0.5::3260::iqn.2026-01.example:gpu"),
    ("root=iscsi:u:p:ru:rp@[fe80::1]::3260::iqn.x", "root=iscsi:u:********:ru:********@[fe80::1]::3260::iqn.x"),
    ("netroot=iscsi:10.0.0.5::3260::iqn.2026-01.example:gpu", "netroot=iscsi:10.0.0.5::3260::iqn.2026-01.example:gpu"),
    ("netroot=cifs://admin:pw1@server/share ro", "netroot=cifs://admin:********@server/share ro"),
    ("inst.ks=https://u:p4ss@h/ks.cfg", "inst.ks=https://u:********@h/ks.cfg"),
    ("quiet rd.iscsi.password=abc rd.iscsi.in.password=def x", "quiet rd.iscsi.password=******** rd.iscsi.in.password=******** x"),
    ('inst.vncpassword="a b" "rd.iscsi.password=c d" q', 'inst.vncpassword="********" "rd.iscsi.password=********" q'),
    ('GRUB_CMDLINE_LINUX="rd.iscsi.password=abc quiet"', 'GRUB_CMDLINE_LINUX="rd.iscsi.password=******** quiet"'),
    # Not credentials: passthrough is not "pass", a token= inside another value is not a key, user names stay.
    ("iommu.passthrough=1 rd.luks.options=token-timeout=0 rd.iscsi.username=ogc", None),
    ("rd.iscsi.password= quiet", None),
])
def test_credentials_are_masked_and_the_rest_kept(line, shown):
    assert redact.redact(line) == (line if shown is None else shown)
    assert redact.redact(redact.redact(line)) == redact.redact(line)


def test_redact_all_walks_results_and_leaves_other_types():
    result = {"before": ["netroot=iscsi:u:pw@h::3260::iqn"], "n": 3, "diff": [{"after": "x rd.iscsi.password=pw\n"}]}
    assert redact.redact_all(result) == {"before": ["netroot=iscsi:u:********@h::3260::iqn"], "n": 3,
                                         "diff": [{"after": "x rd.iscsi.password=********\n"}]}
    assert redact.redact(None) is None


SECRET = st.text(string.ascii_letters + string.digits + "-_.!%", min_size=4, max_size=16).filter(
    lambda s: s[0] not in "-_." and "-" not in s[:1])
PLAIN = st.sampled_from(["quiet", "splash", "iommu=pt", "vfio-pci.ids=10de:1db4", "root=UUID=1", "ro",
                         "console=ttyS0,115200n8", "iommu.passthrough=1", "rd.lvm.lv=rl/root"])
CREDENTIAL = st.sampled_from(["netroot=iscsi:ogc:{s}@10.0.0.5::3260::iqn.x", "root=iscsi:a:{s}:b:{s}@h::::iqn",
                              "netroot=cifs://ogc:{s}@srv/share", "rd.iscsi.password={s}", "inst.vncpassword={s}",
                              "rd.iscsi.in.password={s}"])


@settings(max_examples=200, deadline=None)
@given(st.lists(PLAIN, max_size=6), CREDENTIAL, SECRET, st.integers(0, 6))
@example(args=[], credential="rd.iscsi.password={s}", secret="pass", where=0)   # the secret is part of the key
def test_property_a_credential_never_survives_and_nothing_else_changes(args, credential, secret, where):
    args = list(args)
    at = min(where, len(args))
    args.insert(at, credential.format(s=secret))
    masked = kc.split(redact.redact(kc.join(args)))
    # The credential's own words may contain the secret ("pass" in "password="), so compare with the mask in place.
    assert masked[at] == credential.format(s=MASK)
    assert masked == [redact.redact(a) for a in args]
    assert masked[:at] + masked[at + 1:] == args[:at] + args[at + 1:]      # every other argument as it was


@settings(max_examples=200, deadline=None)
@given(st.lists(PLAIN, max_size=8))
def test_property_lines_without_credentials_are_left_alone(args):
    line = kc.join(args)
    assert redact.redact(line) == line


@pytest.mark.parametrize("text, secret, shown", [
    ("the BMC refused the user e (HTTP Error 401: Unauthorized)", "e",
     "the BMC refused the user ******** (HTTP Error 401: Unauthorized)"),
    ("HTTP Error 401 on GET request to 'https://10.0.0.2/redfish/v1/Systems'", "e",
     "HTTP Error 401 on GET request to 'https://10.0.0.2/redfish/v1/Systems'"),
    ("login failed for ogc:p@ss@10.0.0.2", "p@ss", "login failed for ogc:********@10.0.0.2"),
    ("nothing to hide", "", "nothing to hide"),
    (None, "x", ""),
])
def test_a_secret_is_masked_as_a_token_not_as_a_substring(text, secret, shown):
    assert redact.mask_secret(text, secret) == shown


WORD = st.text(string.ascii_letters + string.digits, min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=10), WORD, st.lists(st.booleans(), min_size=10, max_size=10))
def test_property_masking_keeps_every_other_word(words, secret, put):
    text = " ".join(secret if put[i] else w for i, w in enumerate(words))
    masked = redact.mask_secret(text, secret)
    assert secret not in masked.split(" ")
    for before, after in zip(text.split(" "), masked.split(" ")):
        assert after == (MASK if before == secret else before)
