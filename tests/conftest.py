import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

from needs import missing  # noqa: E402 - the folder above is on the path now


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*names): skip unless these extras or tools are installed"
                                       " (tests/needs.py: the table, and the reason each skip gives)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked ``needs`` whose extra is missing gets a skip marker, before the
    skip markers are read (so the skip is reported at the test, with the reason)."""
    for mark in item.iter_markers("needs"):
        for need in mark.args:
            reason = missing(need)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                return
