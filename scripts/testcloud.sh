#!/usr/bin/env bash
# The local test cloud: real Keystone, Nova API (osapi_compute) and Glance API on 127.0.0.1, their
# databases in a MariaDB server of its own (Debian's mariadb-server, as kolla-ansible deploys them), for the
# tests, the benchmark and the demo. Installs the services on first use (scripts/openstack-venv.sh,
# about 2 minutes), then:
#   scripts/testcloud.sh start  [--dir DIR] [--lifetime SECONDS]   ~20-30 s; prints ports and clouds.yaml
#        [--with-compute [--nova-pci-from FILE [--nova-scheduler-from FILE]] [--fake-gpus FILE] [--compute-host NAME]]
#                                       also broker, placement, conductor, scheduler, a fake nova-compute;
#                                       [pci]/[filter_scheduler] from a nova.conf kolla rendered (compute.py)
#   scripts/testcloud.sh status [--dir DIR]                         exit 0 when MariaDB and the three APIs run
#   scripts/testcloud.sh stop   [--dir DIR]                         stops every process the cloud started
#   scripts/testcloud.sh wipe   [--dir DIR] [--all]                 stop + delete databases, keys, images
#                                       (the next start restores the freshly initialised databases; --all: migrate again)
# DIR defaults to .demo/cloud (env OGC_TESTCLOUD_DIR). Every server, and every process it started, stops by
# itself after the lifetime (default 7200 s, env OGC_TESTCLOUD_LIFETIME). Use the cloud with
#   OS_CLIENT_CONFIG_FILE=DIR/clouds.yaml OS_CLOUD=ogc-test
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
case "${1:-}" in
  start|stop|status|wipe) ;;
  *) echo "usage: $0 {start|stop|status|wipe} [--dir DIR] [--lifetime SECONDS]" >&2; exit 2 ;;
esac
if [ "$1" = start ]; then
  venv=$("$root/scripts/openstack-venv.sh")
else
  venv=${OGC_OPENSTACK_VENV:-$root/.cache/openstack-venv}
  if [ ! -x "$venv/bin/python" ]; then
    venv=$("$root/scripts/openstack-venv.sh")
  fi
fi
exec "$venv/bin/python" "$root/scripts/testcloud/testcloud.py" "$@"
