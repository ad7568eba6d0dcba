"""legalize: make ML model graphs legal for strict compilers.

Public API (``legalizer.api``): ``load`` a model (a path, an ``onnx.ModelProto``, an
``onnx_ir.Model``, or a PyTorch module with example inputs) into the IR, ``verify`` its
broadcasting ops under a profile, ``legalize`` it for a target (the same kind of model
comes back), ``save`` it (or ``to_onnx``), and ``check`` original against result on
onnxruntime (and against PyTorch for a model that came from it); the IR itself is
``Graph``. ``snapshot`` before ``legalize`` records the regions it rewrites, which
``report_html`` draws in a self-contained HTML page. ``legalizer.onnx_ir.LegalizePass``
is the pass for ``onnx_ir`` pass managers (import it explicitly: it needs the
``onnx_ir`` package).
"""

from .errors import BadInput, LegalizeError, UsageError
from .ir import Graph, Node, TensorType, Value
from .model import Model
from .verify import VerifyResult
# The subpackages named like API functions (check, verify) are imported first, so that
# importing them later (lazily, inside a function) does not rebind the names below.
from .check import ort as _ort  # noqa: F401
from .api import NotLegal, check, legalize, load, save, to_onnx, verify
from .regions import snapshot
from .html_report import render as report_html

from .version import __version__

__all__ = ["load", "save", "to_onnx", "verify", "legalize", "check", "Graph", "Node", "Value", "TensorType",
           "Model", "VerifyResult", "snapshot", "report_html", "LegalizeError", "BadInput", "UsageError",
           "NotLegal", "__version__"]
