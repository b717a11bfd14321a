"""ansible-test's pip bootstrap, made here: Python's own ensurepip, then pip from the package index pip is configured
with (scripts/ansible-test.sh saves it where ansible-test looks before it downloads its own).

ansible-test creates a virtualenv per sanity test without pip, then runs its cached ``get-pip`` script with the venv's
Python and pip's install arguments (the pinned pip, and get-pip's own --no-setuptools/--no-wheel). Its own script
comes from a host of ansible's CI, which a machine with only a package index cannot reach.
"""

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}
# ensurepip in a process of its own: it points PIP_CONFIG_FILE at /dev/null in the process that runs it, which would
# hide the index and certificates pip is configured with from the install below.
subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, stdout=subprocess.DEVNULL)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--quiet",
                          *[arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]]))
