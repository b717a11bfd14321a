#!/usr/bin/env bash
# Run one kolla-ansible step for role kolla_deploy, keeping its whole output in a log file and
# copying it to the operator's terminal while it runs (when there is one).
#   run-kolla-step.sh LOG STREAM_TO_TTY(true|false) TIMEOUT_S COMMAND [ARGS...]
# Exit status: the command's. On failure the last lines of the log are printed on stdout.
set -uo pipefail
log=$1 tty=$2 timeout_s=$3
shift 3
# kolla-ansible is an Ansible run of its own, with its own ansible.cfg (the task sets ANSIBLE_CONFIG). What a job
# runner set for the run that called this must not reach it: ansible-runner (AWX, Automation Platform) points the
# stdout callback at its event writer (kolla's events would join the job's) and the fact cache at the job's
# artifacts, where this run's modules left partial facts (kolla-ansible skips gathering facts for a host whose
# cached facts are not empty, and then misses ansible_facts.nodename).
unset ANSIBLE_STDOUT_CALLBACK ORIGINAL_STDOUT_CALLBACK ANSIBLE_CALLBACK_PLUGINS ANSIBLE_LOAD_CALLBACK_PLUGINS \
  ANSIBLE_CACHE_PLUGIN ANSIBLE_CACHE_PLUGIN_CONNECTION AWX_ISOLATED_DATA_DIR RUNNER_OMIT_EVENTS RUNNER_ONLY_FAILED_EVENTS
mkdir -p "$(dirname "$log")"
out=/dev/null
if [ "$tty" = true ] && { : >/dev/tty; } 2>/dev/null; then
  out=/dev/tty
fi
printf '==> %s\n    (log: %s)\n' "$*" "$log" | tee "$log" >"$out"
timeout --kill-after=60 "$timeout_s" "$@" </dev/null 2>&1 | tee -a "$log" >"$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ]; then
  echo "==> stopped after ${timeout_s}s (kolla_deploy_step_timeout)" | tee -a "$log" >"$out"
fi
if [ "$rc" -ne 0 ]; then
  tail -n 30 "$log"
fi
exit "$rc"
