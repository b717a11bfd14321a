#!/usr/bin/env bash
# Run every test: lint, unit and integration tests (pytest), and the molecule scenarios.
# Creates its own virtualenvs on a fresh machine and installs the Debian packages the tests need
# (scripts/setup-system.sh, requirements/debian-packages.txt). Needs root: apt-get for those packages,
# `unshare --mount` in the image tests, the real-kernel harness's apt-get download. Usage: scripts/test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: needs root (apt-get installs the Debian packages in requirements/debian-packages.txt," >&2
  echo "         the image tests run 'unshare --mount', the real-kernel harness runs 'apt-get download');" >&2
  echo "         run it as root, e.g. 'sudo scripts/test.sh'" >&2
  exit 1
fi
"$root/scripts/setup-system.sh"
"$root/scripts/bootstrap.sh"
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"

# Each stage says what the previous one cost (bench/README.md, "Test command, stage by stage").
stage_started=0  # the first figure is the set-up (packages, venv)
step() {
  printf '\n(%d s)\n==> %s\n' "$((SECONDS - stage_started))" "$*"
  stage_started=$SECONDS
}

# The OpenStack services' venv (scripts/openstack-venv.sh, about 2 minutes on a fresh clone, mostly downloads and
# unpacking) builds while the linters run. The tests that need it call the same script, which waits on this
# build's lock; if this build fails, the first of them builds it again and reports the error.
mkdir -p "$root/.cache"
"$root/scripts/openstack-venv.sh" > "$root/.cache/openstack-venv.prebuild.log" 2>&1 &
venv_prebuild=$!
trap 'kill "$venv_prebuild" 2>/dev/null || true' EXIT  # a failed lint stops the build with the command

step "yamllint"
yamllint --strict .

step "ansible-lint (profile production)"
ansible-lint --offline

step "pytest (unit and integration)"
# Two workers (pytest-xdist): a test cloud's start, a simulated reboot or a server's boot waits on I/O while the
# other worker computes. tests/conftest.py keeps each file's tests (and the tests sharing a test cloud) on one
# worker and hands out the slowest groups first; --durations lists the slowest tests (bench/README.md).
set +e
python -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --durations=30
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
wait "$venv_prebuild" || echo "note: the early OpenStack venv build failed (.cache/openstack-venv.prebuild.log); the tests built it themselves" >&2
[ "$rc" -eq 0 ] || exit "$rc"

step "molecule (every scenario)"
molecule test --all

echo
echo "(molecule: $((SECONDS - stage_started)) s; whole command: ${SECONDS} s)"
echo "All tests passed."
