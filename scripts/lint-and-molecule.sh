#!/usr/bin/env bash
# The linters, then every molecule scenario: the part of the test command that scripts/test.sh runs beside
# pytest. Runs every step even after a failure, so one run reports them all; exits 1 when any failed.
# Expects the toolkit's venv (scripts/bootstrap.sh) on PATH and ANSIBLE_CONFIG set, as scripts/test.sh does.
#   scripts/lint-and-molecule.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

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

run "yamllint" yamllint --strict .
run "ansible-lint (profile production)" ansible-lint --offline
run "molecule (every scenario)" molecule test --all

if [ "${#failed[@]}" -gt 0 ]; then
  printf '\nlint-and-molecule: failed: %s\n' "$(IFS=,; echo "${failed[*]}")"
  exit 1
fi
printf '\nlint-and-molecule: every step passed (%d s)\n' "$SECONDS"
