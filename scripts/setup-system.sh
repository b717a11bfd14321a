#!/usr/bin/env bash
# Install the Debian packages the tests need (requirements/debian-packages.txt). Idempotent: when every
# package is already installed it changes nothing and needs neither root nor the network; otherwise it
# runs `apt-get update`, then `apt-get install --no-install-recommends` of the missing ones (root).
# Called by scripts/test.sh.
#   scripts/setup-system.sh            install what is missing
#   scripts/setup-system.sh --check    only list what is missing (exit 1 when something is)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list="$root/requirements/debian-packages.txt"
check_only=false
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-system: this is not a Debian system (no dpkg-query/apt-get): install by hand the packages" >&2
  echo "              listed in requirements/debian-packages.txt, or run the tests on Debian 12" >&2
  exit 1
fi

mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$list" | awk '{print $1}')
missing=()
for package in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null || true)
  [ "${status:0:2}" = "ii" ] || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup-system: all ${#wanted[@]} Debian packages the tests need are installed"
  exit 0
fi
if $check_only; then
  echo "setup-system: missing Debian packages: ${missing[*]}"
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-system: missing Debian packages: ${missing[*]}" >&2
  echo "              installing them needs root: run 'sudo scripts/setup-system.sh' (or the tests as root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -q -o DPkg::Lock::Timeout=600)
echo "setup-system: installing ${missing[*]}"
if ! "${apt[@]}" update; then
  echo "setup-system: 'apt-get update' failed (no network or no Debian mirror reachable?); the packages" >&2
  echo "              still missing are: ${missing[*]}" >&2
  exit 1
fi
if ! "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; then
  echo "setup-system: 'apt-get install ${missing[*]}' failed; see apt's message above" >&2
  exit 1
fi
echo "setup-system: installed ${missing[*]}"
