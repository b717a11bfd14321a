#!/usr/bin/env bash
# Run the main job on the embedded default: site.yml on the demo inventory (simulated GPU hosts in
# sandbox roots under .demo/ plus real local OpenStack API services). Extra arguments go to
# ansible-playbook, e.g. `scripts/demo.sh --tags plan` or `scripts/demo.sh --check --diff`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/bootstrap.sh"
# The PCI ID database the plan and reports name devices from, so the first run shows the names a later run shows.
PYTHONPATH="$root/collections" "$root/.venv/bin/python" "$root/scripts/testcloud/demo_setup.py" "$root/.demo"
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"
exec ansible-playbook site.yml "$@"
