import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# Every report a test makes, in this process or a command it runs, is validated against
# legalizer/report.schema.json before it is written or printed (legalizer.report.dumps).
os.environ["LEGALIZE_VALIDATE_REPORTS"] = "1"

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


# The tests' one way to run the command and one way to build a model. tests/helpers.py
# holds them, for the module-level helpers of a test file, which cannot take fixtures;
# imported when a test asks, so that collecting the tests imports no model library.
@pytest.fixture
def legalize():
    """``legalize ARGS`` in a process of its own -> subprocess.CompletedProcess
    (``helpers.cli_process``: cwd, env, isolated, prelude, timeout)."""
    from helpers import cli_process

    return cli_process


@pytest.fixture
def legalize_in_process():
    """``legalize ARGS`` in this process -> (exit status, stdout, stderr)
    (``helpers.cli_in_process``: a test may patch a stage first)."""
    from helpers import cli_in_process

    return cli_in_process


@pytest.fixture
def onnx_model():
    """An ONNX model of graph "g" from nodes, inputs, outputs (``helpers.make_model``)."""
    from helpers import make_model

    return make_model


@pytest.fixture
def scratch():
    """Passes registered by a test are gone after it."""
    from legalizer.passes import PASSES, base

    before, functions = dict(PASSES), dict(base._BY_FUNCTION)
    yield
    PASSES.clear()
    PASSES.update(before)
    base._BY_FUNCTION.clear()
    base._BY_FUNCTION.update(functions)
