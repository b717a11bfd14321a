"""playbooks/report.yml on three fixture hosts, checked in a real headless browser (Debian's chromium): the page
loads with no console message (its Content-Security-Policy makes any outside resource one), its SVG has one box
per IOMMU group of the plans, each device carries its verdict and reason; the Markdown says the same. The
screenshot is kept under pytest's tmp directory (path printed) and, when OGC_ARTIFACTS_DIR is set, copied there."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from ogc_testlib import fixture_inventory, project_playbook

pytestmark = pytest.mark.integration
CHROMIUM = "/usr/bin/chromium"


def chromium(url, *args, tmp_path):
    """Run headless chromium on url; returns (stdout, console lines from its log)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium); the "
                    "test set-up does")
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--proxy-server=127.0.0.1:9", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                           *args, url], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


class SvgCensus(HTMLParser):
    """Group boxes and devices per host map, from the DOM chromium dumped."""

    def __init__(self):
        super().__init__()
        self.hosts, self.host, self.titles, self._in_title = {}, None, [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg" and "iommu-map" in (attrs.get("class") or ""):
            self.host = attrs["data-host"]
            self.hosts[self.host] = {"boxes": 0, "devices": {}}
        elif tag == "rect" and attrs.get("class") == "group-box":
            self.hosts[self.host]["boxes"] += 1
        elif tag == "g" and attrs.get("class") == "device":
            self.hosts[self.host]["devices"][attrs["data-address"]] = attrs["data-verdict"]
        elif tag == "title" and self.host:
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "svg":
            self.host = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.titles.append(data)


def test_console_check_catches_outside_resources(tmp_path):
    """The detector itself: a page that reaches outside or logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head>"
                    "<body><img src=\"http://fonts.invalid/x.png\"><script>console.error('x')</script></body></html>")
    _dom, console = chromium(page.as_uri(), "--dump-dom", tmp_path=tmp_path)
    assert any("violates the following Content Security Policy" in line for line in console), console


def test_fleet_report_in_a_real_browser(tmp_path, fixture_host):
    inventory = fixture_inventory(tmp_path, fixture_host)
    plans = tmp_path / "plans"
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}")
    assert rc == 0, out
    html, markdown = tmp_path / "out" / "fleet.html", tmp_path / "out" / "fleet.md"
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}", "-e", f"report_html_path={html}",
                           "-e", f"report_markdown_path={markdown}", playbook="report.yml")
    assert rc == 0, out
    assert f"Fleet report: {html} (HTML) and {markdown} (Markdown): 3 host(s), 5 GPU(s) offered" in " ".join(out.split())

    dom, console = chromium(html.as_uri(), "--dump-dom", tmp_path=tmp_path)
    assert console == []
    census = SvgCensus()
    census.feed(dom)
    files = {h: json.loads((plans / f"{h}.json").read_text()) for h in ("seed", "intel", "twin")}
    for host in ("seed", "twin"):
        groups = files[host]["facts"]["iommu_groups"]
        assert census.hosts[host]["boxes"] == len(groups) > 0
        assert sorted(census.hosts[host]["devices"]) == sorted(a for g in groups.values() for a in g)
    assert "intel" not in census.hosts  # IOMMU off: no groups to draw, and the page says so
    assert "The IOMMU is not active on this host" in dom
    seed = census.hosts["seed"]["devices"]
    assert [a for a, v in sorted(seed.items()) if v == "nova"] == ["0000:27:00.0", "0000:44:00.0", "0000:a3:00.0",
                                                                   "0000:c3:00.0"]
    assert seed["0000:28:00.0"] == "vfio" and seed["0000:03:00.0"] == "host"
    # The reason on hover (<title>) and in the text.
    hover = " ".join(census.titles)
    assert "0000:28:00.0 Tesla V100 PCIe 16GB: bound to vfio-pci (not offered). shares IOMMU group 19" in hover
    assert "0000:03:00.0 ASPEED Graphics Family: stays on the host. VGA controller from vendor ASPEED" in hover
    assert re.search(r"<td>0000:28:00.0</td><td>Tesla V100 PCIe 16GB</td><td>19</td>.*shares IOMMU group 19", dom)
    # Totals per model across the fleet, pending reboots.
    assert re.search(r"<td>tesla-v100</td><td>Tesla V100 PCIe 16GB</td><td>type-PCI</td><td>4</td><td>seed \(4\)", dom)
    assert re.search(r"<li><strong>intel</strong>: kernel command line lacks intel_iommu=on", dom)

    md = markdown.read_text()
    assert "| tesla-v100 | Tesla V100 PCIe 16GB | type-PCI | 4 | seed (4) |" in md
    assert "- **intel**: kernel command line lacks intel_iommu=on" in md
    assert "- group 19 (passed): 0000:20:03.1 bridge" in md

    shot = tmp_path / "fleet-report.png"
    _out, console = chromium(html.as_uri(), f"--screenshot={shot}", "--window-size=1400,2400", tmp_path=tmp_path)
    assert console == [] and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000
    print(f"\nfleet report screenshot: {shot}")
    if os.environ.get("OGC_ARTIFACTS_DIR"):
        os.makedirs(os.environ["OGC_ARTIFACTS_DIR"], exist_ok=True)
        shutil.copy(shot, os.environ["OGC_ARTIFACTS_DIR"])

    # A second run changes nothing; check mode writes nothing.
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}", "-e", f"report_html_path={html}",
                           "-e", f"report_markdown_path={markdown}", playbook="report.yml")
    assert rc == 0 and "changed=0" in out, out
    other = tmp_path / "other"
    rc, out = project_playbook(inventory, "--check", "-e", f"passthrough_plan_dir={plans}", "-e",
                           f"report_html_path={other}/fleet.html", "-e", f"report_markdown_path={other}/fleet.md",
                           playbook="report.yml")
    assert rc == 0 and not other.exists(), out


def test_report_loads_plans_through_the_loader(tmp_path, fixture_host):
    """The report reads the plans through the one loader: a host without a plan file is a row with its error, the plan
    file of a host another slice holds is in the report, and a stale plan file is refused with the command to run."""
    inventory = fixture_inventory(tmp_path, fixture_host)
    plans = tmp_path / "plans"
    rc, out = project_playbook(inventory, "-e", f"passthrough_plan_dir={plans}", "-e", "passthrough_show_report=false")
    assert rc == 0, out
    # Another slice's host: a copy of seed's plan as the plan of "other".
    other = json.loads((plans / "seed.json").read_text())
    other["plan"]["host"] = "other"
    (plans / "other.json").write_text(json.dumps(other))
    (plans / "intel.json").unlink()
    markdown = tmp_path / "out" / "fleet.md"
    where = ("-e", f"passthrough_plan_dir={plans}", "-e", f"report_html_path={tmp_path}/out/fleet.html",
             "-e", f"report_markdown_path={markdown}")
    rc, out = project_playbook(inventory, *where, playbook="report.yml")
    assert rc == 0, out
    flat = " ".join(out.split())
    assert "4 host(s), 9 GPU(s) offered" in flat, out
    assert (f"no plan file for intel (file not found: {plans}/intel.json): run the plan phase "
            "(ansible-playbook playbooks/plan.yml) with passthrough_plan_dir set") in flat, out
    md = markdown.read_text()
    assert "| tesla-v100 | Tesla V100 PCIe 16GB | type-PCI | 8 | other (4), seed (4) |" in md, md

    # A plan made with another policy than the host's current one is stale: refused, naming the fix.
    stale = fixture_inventory(tmp_path, fixture_host, {"seed": {"passthrough_policy": {"exclude": ["0000:27:00.0"]}}})
    rc, out = project_playbook(stale, *where, playbook="report.yml")
    flat = " ".join(out.split())
    assert rc != 0, out
    assert f"passthrough_plan_load: host seed: plan file {plans}/seed.json is stale" in flat, out
    assert "run: ansible-playbook playbooks/plan.yml -i inventory/<env> --limit seed" in flat, out

    # A plan file another user could have written (planted in the shared plan directory: it would count in the fleet,
    # reach Nova and the report): refused, naming the file, its owner and mode and the fix; nothing is written. The
    # advice followed (the file is this user's alone), the report is made again.
    inventory = fixture_inventory(tmp_path, fixture_host)  # the policy the plans were made with again
    planted = plans / "planted.json"
    planted.write_text(json.dumps(dict(other, plan=dict(other["plan"], host="planted"))))
    os.chown(planted, 65534, 65534)  # nobody
    markdown.unlink()
    rc, out = project_playbook(inventory, *where, playbook="report.yml")
    flat = " ".join(out.split())
    assert rc != 0 and "Traceback" not in out, out
    assert (f"passthrough_fleet: The plan file {planted} is owned by nobody, mode 0644: another user than this one "
            f"could have written it (chown root {planted}).") in flat, out
    assert "The plan directory is the fleet's record" in flat and not markdown.exists()
    advice = re.search(r"\((chown root \S+)\)", flat).group(1).split()
    subprocess.run(advice, check=True, timeout=30)
    rc, out = project_playbook(inventory, *where, playbook="report.yml")
    assert rc == 0 and "planted" in markdown.read_text(), out
