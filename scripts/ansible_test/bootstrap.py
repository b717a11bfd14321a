"""Put scripts/ansible_test/get_pip.py where ansible-test looks for its cached pip bootstrap.

ansible-test (the ansible-core of the toolkit's venv) names the file after the pip it pins:
``~/.ansible/test/cache/get_pip_<version>.py``. An existing file is left as it is.

    python scripts/ansible_test/bootstrap.py
"""

import os
import shutil
import sys

from ansible_test._internal.python_requirements import get_venv_packages


class _Python:  # pylint: disable=too-few-public-methods
    """The one field get_venv_packages reads of ansible-test's PythonConfig."""

    def __init__(self, version):
        self.version = version


def main():
    pip_version = get_venv_packages(_Python(f"{sys.version_info.major}.{sys.version_info.minor}"))["pip"]
    cache = os.path.expanduser(f"~/.ansible/test/cache/get_pip_{pip_version.replace('.', '_')}.py")
    if not os.path.exists(cache):
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "get_pip.py"), cache + ".tmp")
        os.replace(cache + ".tmp", cache)
    print(f"ansible-test's pip {pip_version} bootstrap: {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
