"""legalize: make ML model graphs legal for strict compilers.

Public API: ``load``, ``save``, ``verify``, and the IR (``Graph``).
"""

from .errors import BadInput, LegalizeError, UsageError
from .fileio import load
from .ir import Graph, Node, TensorType, Value
from .model import Model
from .verify import VerifyResult, verify
from .api import save, to_onnx

__version__ = "0.1.0"

__all__ = ["load", "save", "to_onnx", "verify", "Graph", "Node", "Value", "TensorType", "Model",
           "VerifyResult", "LegalizeError", "BadInput", "UsageError", "__version__"]
