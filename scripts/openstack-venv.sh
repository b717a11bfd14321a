#!/usr/bin/env bash
# Create the venv holding real OpenStack services (Keystone, Nova, Glance, 2026.1 release) for the
# local test cloud and for validating rendered Nova config with Nova's own parser.
# Safe to run repeatedly: it reinstalls only when the requirement files changed.
#   scripts/openstack-venv.sh            prints nothing on success but the venv path on stdout
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${OGC_OPENSTACK_VENV:-$root/.cache/openstack-venv}
python=${OGC_PYTHON:-python3.11}
stamp="$venv/.ogc-installed"
want=$(cat "$root/requirements/openstack-services.txt" "$root/requirements/upper-constraints-2026.1.txt" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv"; exit 0
fi
mkdir -p "$(dirname "$venv")"
# A lock so parallel test processes do not install twice into the same venv.
exec 9>"$venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv"; exit 0
fi
echo "openstack-venv: installing Keystone, Nova and Glance into $venv (about 2 minutes)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -c "$root/requirements/upper-constraints-2026.1.txt" \
  -r "$root/requirements/openstack-services.txt" >&2
echo "$want" > "$stamp"
echo "$venv"
