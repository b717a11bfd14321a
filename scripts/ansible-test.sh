#!/usr/bin/env bash
# The collection's own checks, as every Ansible collection has them: `ansible-test sanity` (documentation, argument
# specs, imports, pylint, pep8, metadata) and `ansible-test units` (its tests/unit/), run in the collection
# (collections/ansible_collections/open_gpu_cloud/toolkit) with the toolkit venv's ansible-core and Python.
# ansible-test keeps a virtualenv per sanity test under ~/.ansible/test/venv (made once, from the package index);
# its pip bootstrap is Python's own (scripts/ansible_test/). Reports go to the collection's tests/output/ (ignored).
#   scripts/ansible-test.sh            sanity, then units
#   scripts/ansible-test.sh sanity     one of them (any further arguments go to ansible-test)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
collection="$root/collections/ansible_collections/open_gpu_cloud/toolkit"
python_version=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info.major}.{sys.version_info.minor}")')
"$venv/bin/python" "$root/scripts/ansible_test/bootstrap.py"
cd "$collection"
if [ "$#" -eq 0 ]; then
  "$venv/bin/ansible-test" sanity --local --python "$python_version"
  exec "$venv/bin/ansible-test" units --local --python "$python_version"
fi
exec "$venv/bin/ansible-test" "$@" --local --python "$python_version"
