#!/usr/bin/env bash
# The linters, then every molecule scenario: the part of the test command that scripts/test.sh runs beside
# pytest. Runs every step even after a failure, so one run reports them all; exits 1 when any failed.
# Expects the toolkit's venv (scripts/bootstrap.sh) on PATH and ANSIBLE_CONFIG set, as scripts/test.sh does.
#   scripts/lint-and-molecule.sh [lint] [molecule] [server]
# With no argument it runs all three parts; the test command's tiers name theirs (scripts/test.sh):
#   lint      yamllint, ansible-lint (its syntax check of every playbook included), ansible-test sanity and units
#   molecule  every molecule scenario but host_server (sandbox roots, no container engine)
#   server    molecule/host_server: the real Debian server under qemu (TCG)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
parts=("$@")
[ "${#parts[@]}" -gt 0 ] || parts=(lint molecule server)
want() {  # want PART: whether this run includes PART
  local part
  for part in "${parts[@]}"; do [ "$part" = "$1" ] && return 0; done
  return 1
}
for part in "${parts[@]}"; do
  case "$part" in
    lint|molecule|server) ;;
    *) echo "lint-and-molecule.sh: unknown part '$part': give lint, molecule and/or server (none: all three)" >&2
       exit 2 ;;
  esac
done

failed=()
stage_started=$SECONDS
run() {  # run NAME COMMAND...: the step's output, then its seconds and whether it passed
  local name=$1; shift
  printf '\n==> %s\n' "$name"
  stage_started=$SECONDS
  if "$@"; then
    printf '(%s: %d s, passed)\n' "$name" "$((SECONDS - stage_started))"
  else
    printf '(%s: %d s, FAILED)\n' "$name" "$((SECONDS - stage_started))"
    failed+=("$name")
  fi
}

# The real server's scenario (molecule/host_server: a Debian server under qemu, TCG) is the lane's longest step and
# mostly one core's work (its first run on a machine also builds the server image): it starts first and runs beside
# the linters and the other scenarios; its output follows theirs.
server_log="$root/.cache/molecule-host_server.log"
mkdir -p "$root/.cache"
server_started=$SECONDS
server_pid=""
if want server; then
  molecule test -s host_server > "$server_log" 2>&1 &
  server_pid=$!
fi
# Interrupted (scripts/test.sh ends the lane on its own exit): the scenario's qemu runs in a session of its own (its
# time limiter's), so molecule's destroy stops it by its PID.
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  molecule destroy -s host_server > /dev/null 2>&1 || true
}
trap 'stop_server; exit 1' INT TERM

if want lint; then
  run "yamllint" yamllint --strict .
  run "ansible-lint (profile production)" ansible-lint --offline
  run "ansible-test sanity and units (the collection)" "$root/scripts/ansible-test.sh"
fi
if want molecule; then
  run "molecule (every other scenario)" molecule test --all --exclude host_server
fi

if want server; then
  server_step="molecule host_server"
  printf '\n==> %s (the real server, started with the lane)\n' "$server_step"
  if wait "$server_pid"; then server_rc=0; else server_rc=$?; fi
  cat "$server_log"
  if [ "$server_rc" -eq 0 ]; then
    printf '(%s: %d s, passed)\n' "$server_step" "$((SECONDS - server_started))"
  else
    printf '(%s: %d s, FAILED)\n' "$server_step" "$((SECONDS - server_started))"
    failed+=("$server_step")
  fi
fi
trap - INT TERM

if [ "${#failed[@]}" -gt 0 ]; then
  printf '\nlint-and-molecule: failed: %s\n' "$(IFS=,; echo "${failed[*]}")"
  exit 1
fi
printf '\nlint-and-molecule: every step passed (%d s)\n' "$SECONDS"
