#!/usr/bin/env bash
# Run every test: lint, unit and integration tests (pytest), and the molecule scenarios. The linters and molecule
# (scripts/lint-and-molecule.sh) run beside pytest, in their own lane: alone they leave part of the two cores idle
# (molecule 1.4 cores, the linters one), beside pytest that time is used (bench/README.md, "Test command").
# Creates its own virtualenvs on a fresh machine and installs the Debian packages the tests need
# (scripts/setup-system.sh, requirements/debian-packages.txt). Needs root: apt-get for those packages,
# `unshare --mount` in the image tests, the real-kernel harness's apt-get download.
#
# Usage: scripts/test.sh [TIER]. With no tier it runs everything (what .ci/run calls); a tier runs a part of it
# (what each proves and costs: README.md, "Tiers of the test command"):
#   quick    yamllint, ansible-lint (the syntax check of every playbook included), ansible-test sanity and units,
#            and pytest's unit and property tests (tests/unit): the inner loop
#   sandbox  pytest's integration tests but the heavy ones (real OpenStack services, kolla-ansible's genconfig,
#            etcd, the Redfish emulator, the playbooks on sandbox roots) and every molecule scenario but host_server
#   heavy    what boots under qemu (TCG): the real kernel (tests/integration/realkernel), the GPU guest image
#            (built by the project's role, then booted) and the real Debian server (molecule/host_server)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tier=${1:-all}
# What each tier runs: pytest's arguments, the lane's parts (scripts/lint-and-molecule.sh), and whether the GPU guest
# image is built beside the tests.
case "$tier" in
  all)     pytest_args=();                             lane_parts=(lint molecule server); build_image=1 ;;
  quick)   pytest_args=(tests/unit);                   lane_parts=(lint);                 build_image=0 ;;
  sandbox) pytest_args=(tests/integration -m "not heavy"); lane_parts=(molecule);         build_image=0 ;;
  heavy)   pytest_args=(-m heavy);                     lane_parts=(server);               build_image=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
  *) echo "test.sh: unknown tier '$tier': give quick, sandbox or heavy, or nothing for every test" >&2; exit 2 ;;
esac
if [ "$#" -gt 1 ]; then
  echo "test.sh: one tier at most (got: $*); with none it runs every test" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: needs root (apt-get installs the Debian packages in requirements/debian-packages.txt," >&2
  echo "         the image tests run 'unshare --mount', the real-kernel harness runs 'apt-get download');" >&2
  echo "         run it as root, e.g. 'sudo scripts/test.sh'" >&2
  exit 1
fi
# Python keeps the bytecode it compiles (in __pycache__/, ignored by git), as it does on a machine that does not set
# PYTHONDONTWRITEBYTECODE: the project's plugins and scripts are compiled once, not in every process (the effect on
# the whole run is within the machine's noise: bench/README.md, "Test command").
unset PYTHONDONTWRITEBYTECODE
"$root/scripts/setup-system.sh"

# Each stage says what it cost (bench/README.md, "Test command, stage by stage").
stage_started=0  # the first figure is the set-up (packages, venvs)
step() {
  printf '\n(%d s)\n==> %s\n' "$((SECONDS - stage_started))" "$*"
  stage_started=$SECONDS
}

# The OpenStack services' venv (scripts/openstack-venv.sh, about 2 minutes on a fresh clone, mostly downloads and
# unpacking) builds while bootstrap.sh builds the toolkit's venv. The tests that need it call the same script,
# which waits on this build's lock; if this build fails, the first of them builds it again and reports the error.
mkdir -p "$root/.cache"
"$root/scripts/openstack-venv.sh" > "$root/.cache/openstack-venv.prebuild.log" 2>&1 &
venv_prebuild=$!
lane=""
# An interrupted run stops what it started: the venv build, and the lane's process group (molecule's playbooks).
trap 'kill "$venv_prebuild" 2>/dev/null || true; [ -z "$lane" ] || kill -- "-$lane" 2>/dev/null || true' EXIT

"$root/scripts/bootstrap.sh"
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"

# The GPU guest image (tests/helpers/gpu_image.py): built by the project's own role with diskimage-builder on first
# use (the NVIDIA module compiled by DKMS: bench/README.md, "GPU guest image"), later found in its cache outside
# the checkout, keyed by its inputs, and checked by a run of the role that must change nothing. It starts here so
# that a cold build overlaps the tests; the image tests wait on its lock and reuse this run (OGC_TEST_RUN_ID).
OGC_TEST_RUN_ID="test-$$-$(date +%s)"
export OGC_TEST_RUN_ID
image_prebuild=""
if [ "$build_image" -eq 1 ]; then
  setsid -w python "$root/tests/helpers/gpu_image.py" build > "$root/.cache/gpu-image.prebuild.log" 2>&1 &
  image_prebuild=$!
fi
stop_background() {
  kill "$venv_prebuild" 2>/dev/null || true
  [ -z "$image_prebuild" ] || kill -- "-$image_prebuild" 2>/dev/null || true
  [ -z "$lane" ] || kill -- "-$lane" 2>/dev/null || true
}
trap stop_background EXIT

step "tier ${tier}: pytest ${pytest_args[*]:-(every test)}, with the lane (${lane_parts[*]}) beside it"
lane_log="$root/.cache/lint-and-molecule.log"
echo "The lane (scripts/lint-and-molecule.sh ${lane_parts[*]}) runs beside pytest; its output is printed when"
echo "both are done, and meanwhile is in $lane_log"
setsid -w "$root/scripts/lint-and-molecule.sh" "${lane_parts[@]}" > "$lane_log" 2>&1 &
lane=$!

# Two workers (pytest-xdist): a test cloud's start, a simulated reboot or a server's boot waits on I/O while the
# other worker computes. tests/conftest.py keeps each file's tests (and the tests sharing a test cloud) on one
# worker and hands out the slowest groups first; --durations lists the slowest tests (bench/README.md).
# pytest's output is kept (outside the checkout) so that its summary of failures is printed again at the very end,
# after the lane's long output.
pytest_log="$(mktemp "${TMPDIR:-/tmp}/open-gpu-cloud-pytest.XXXXXX")"
set +e
python -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --durations=30 "${pytest_args[@]}" 2>&1 | tee "$pytest_log"
rc=${PIPESTATUS[0]}
set -e
pytest_s=$((SECONDS - stage_started))
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  rc=1
fi
wait "$venv_prebuild" || echo "note: the early OpenStack venv build failed (.cache/openstack-venv.prebuild.log); the tests built it themselves" >&2
[ -z "$image_prebuild" ] || wait "$image_prebuild" || echo "note: the GPU image build failed (.cache/gpu-image.prebuild.log); the image tests say why" >&2
image_prebuild=""

step "waiting for the lane (pytest: ${pytest_s} s, rc ${rc})"
set +e
wait "$lane"
lane_rc=$?
set -e
lane=""
cat "$lane_log"

echo
echo "(tier ${tier}: pytest ${pytest_s} s; whole command ${SECONDS} s)"
if [ "$rc" -ne 0 ]; then
  echo
  echo "pytest's summary (the whole output: $pytest_log):"
  sed -n '/short test summary info/,$p' "$pytest_log" | cut -c1-400
fi
if [ "$rc" -ne 0 ] || [ "$lane_rc" -ne 0 ]; then
  echo "Tests failed: pytest rc ${rc}, linters and molecule rc ${lane_rc} (their steps are named above)." >&2
  exit 1
fi
echo "All tests of tier ${tier} passed."
