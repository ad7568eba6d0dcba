import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from needs import require  # noqa: E402 - the folder above is on the path now


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*names): skip unless these extras or tools are installed"
                                       " (tests/needs.py: the table, and the reason each skip gives)")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        require(*mark.args)
