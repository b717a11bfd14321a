#!/usr/bin/env bash
# Run every test: lint, unit and integration tests (pytest), and the molecule scenarios.
# Creates its own virtualenvs on a fresh machine. Usage: scripts/test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/bootstrap.sh"
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"

step() { printf '\n==> %s\n' "$*"; }

step "yamllint"
yamllint --strict .

step "ansible-lint (profile production)"
ansible-lint --offline

step "pytest (unit and integration)"
set +e
python -m pytest
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"

step "molecule (every scenario)"
molecule test --all

echo
echo "All tests passed."
