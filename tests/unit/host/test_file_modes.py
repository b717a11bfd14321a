"""plugins/filter/file_modes.py: an existing file's mode is never loosened."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ogc_testlib import load_source, collection_plugin

fm = collection_plugin("filter", "file_modes")


@pytest.mark.parametrize("current, ceiling, expected", [
    ("0600", "0640", "0600"),
    ("0644", "0640", "0640"),
    ("0777", "0640", "0640"),
    ("0400", "0640", "0400"),
    ("0604", "0640", "0600"),
    ("640", "0640", "0640"),
])
def test_mode_within_examples(current, ceiling, expected):
    assert fm.mode_within(current, ceiling) == expected


@given(st.integers(0, 0o7777), st.integers(0, 0o7777))
def test_mode_within_never_grants_what_either_withholds(current, ceiling):
    result = int(fm.mode_within(f"{current:04o}", f"{ceiling:04o}"), 8)
    assert result & ~current == 0 and result & ~ceiling == 0
    assert result == current & ceiling


@pytest.mark.parametrize("current, ceiling, words", [
    (416, "0640", "current mode 416 is not a file mode"),
    ("0640", 0o640, "ceiling 416 is not a file mode"),
    ("rw-r-----", "0640", "current mode 'rw-r-----'"),
    ("0890", "0640", "current mode '0890'"),
    (None, "0640", "current mode None"),
    (True, "0640", "current mode True"),
])
def test_mode_within_refuses_what_is_not_an_octal_string(current, ceiling, words):
    with pytest.raises(fm.AnsibleFilterError, match=words):
        fm.mode_within(current, ceiling)
    assert "quote it" in str(pytest.raises(fm.AnsibleFilterError, fm.mode_within, current, ceiling).value)


def test_filter_module_exposes_it():
    assert fm.FilterModule().filters() == {"mode_within": fm.mode_within}
