"""legalize: make ML model graphs legal for strict compilers.

Public API: ``load`` a model file into the IR, ``verify`` its broadcasting ops under a
profile, ``legalize`` it in place for a target, ``save`` it (or ``to_onnx``), and
``check`` original against result on onnxruntime; the IR itself is ``Graph``.
``snapshot`` before ``legalize`` records the regions it rewrites, which ``report_html``
draws in a self-contained HTML page.
"""

from .errors import BadInput, LegalizeError, UsageError
from .fileio import load
from .ir import Graph, Node, TensorType, Value
from .model import Model
from .verify import VerifyResult, verify
from .api import save, to_onnx
from .transform import legalize
from .check.ort import check
from .regions import snapshot
from .html_report import render as report_html

__version__ = "0.1.0"

__all__ = ["load", "save", "to_onnx", "verify", "legalize", "check", "Graph", "Node", "Value", "TensorType",
           "Model", "VerifyResult", "snapshot", "report_html", "LegalizeError", "BadInput", "UsageError", "__version__"]
