"""Quiet torch: its exporters print progress lines and log warnings (torchvision
missing, ...) that are not the user's business; the PyTorch importer, the ``.pt2``
reader and scripts/make_models.py run them inside ``quiet_torch``."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def quiet_torch():
    """The exporters print progress lines and log warnings (torchvision missing, ...);
    also used by scripts/make_models.py."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
