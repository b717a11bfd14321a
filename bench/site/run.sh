#!/usr/bin/env bash
# site.yml on the demo inventory: a first run from a clean .demo (sandbox hosts, plans, kolla
# configuration, test cloud data) and a no-op re-run. Prints wall time, tasks (ok + changed) and
# changed per run. The venvs (.venv, .cache/openstack-venv) are kept: their install is measured
# separately (scripts/bootstrap.sh, scripts/openstack-venv.sh).
# The two runs' logs go outside the checkout (bench/raw_logs.py): <cache>/bench/site/<time>-<commit>/.
#   bench/site/run.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
scripts/bootstrap.sh
scripts/testcloud.sh stop --dir .demo/cloud >/dev/null 2>&1 || true
rm -rf .demo
logdir=$("$root/.venv/bin/python" "$root/bench/raw_logs.py" site)
for run in first no-op; do
  start=$(date +%s.%N)
  ANSIBLE_NOCOLOR=1 scripts/demo.sh > "$logdir/$run.log" 2>&1 || { echo "$run run failed: $logdir/$run.log" >&2; exit 1; }
  end=$(date +%s.%N)
  "$root/.venv/bin/python" - "$logdir/$run.log" "$run" "$start" "$end" <<'PY'
import re, sys
log, run, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ok = changed = 0
for line in open(log, encoding="utf-8"):
    m = re.match(r"^\S+\s+: ok=(\d+)\s+changed=(\d+)", line)
    if m:
        ok += int(m.group(1)); changed += int(m.group(2))
print(f"{run:>7} run: {end - start:7.1f} s wall, {ok:4d} tasks ok (incl. changed), {changed:3d} changed")
PY
done
echo "logs: $logdir"
