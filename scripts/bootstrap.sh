#!/usr/bin/env bash
# Create (or refresh) the toolkit's virtualenv in .venv with the pinned dependencies from
# pyproject.toml. Safe to run repeatedly: it reinstalls only when pyproject.toml changed.
#   scripts/bootstrap.sh          runtime + test dependencies
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
python=${OGC_PYTHON:-python3.11}
stamp="$venv/.ogc-installed"
want=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/ansible-playbook" ]; then
  exit 0
fi
if ! command -v "$python" >/dev/null 2>&1; then
  echo "bootstrap: $python not found. Install Python 3.11 (kolla-ansible 22.x with ansible-core 2.19" >&2
  echo "           needs it) or point OGC_PYTHON at a Python 3.11 interpreter." >&2
  exit 1
fi
echo "bootstrap: creating $venv (first run takes a few minutes)"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$root[test]"
echo "$want" > "$stamp"
version=$("$venv/bin/ansible" --version)
echo "bootstrap: ready (${version%%$'\n'*})"
