"""The last lines of a log file, quoted in the test cloud's error messages (testcloud.py, compute.py, mariadb.py)."""


def tail(path, lines=15):
    """The last LINES lines of PATH ("" when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""
