"""legalize: make ML model graphs legal for strict compilers.

Public API (``legalizer.api``): ``load`` a model (a path, an ``onnx.ModelProto``, an
``onnx_ir.Model``, or a PyTorch module with example inputs) into the IR, ``verify`` its
broadcasting ops under a profile, ``legalize`` it for a target (the same kind of model
comes back; for a path, a ``Result``: the output, the report, the check's state, the
warnings and what the target refuses), ``save`` it (or ``to_onnx``), and ``numeric`` original against result on
onnxruntime (and against PyTorch for a model that came from it); the IR itself is
``Graph``. ``snapshot`` before ``legalize`` records the regions it rewrites, which
``report_html`` draws in a self-contained HTML page; ``overlays`` gives a run's findings
as Model Explorer node data. ``legalizer.onnx_ir.LegalizePass``
is the pass for ``onnx_ir`` pass managers (import it explicitly: it needs the
``onnx_ir`` package).

The names are imported on first use (PEP 562), so that ``import legalizer``, which
every ``legalize`` command does first, costs nothing: ``legalize --help`` imports
neither onnx, numpy nor networkx (docs/architecture.md, "Start-up").
"""

from importlib import import_module

from .version import __version__

# name -> (module, attribute)
_API = {
    "load": (".api", "load"), "save": (".api", "save"), "to_onnx": (".api", "to_onnx"),
    "verify": (".api", "verify"), "legalize": (".api", "legalize"), "check": (".api", "check"),
    "NotLegal": (".errors", "NotLegal"), "Result": (".result", "Result"),
    "Graph": (".ir", "Graph"), "Node": (".ir", "Node"), "Value": (".ir", "Value"), "TensorType": (".ir", "TensorType"),
    "Model": (".model", "Model"), "VerifyResult": (".verifier", "VerifyResult"),
    "snapshot": (".region_pictures", "snapshot"), "report_html": (".html_report", "render"),
    "overlays": (".overlay", "node_data"),
    "LegalizeError": (".errors", "LegalizeError"), "BadInput": (".errors", "BadInput"),
    "UsageError": (".errors", "UsageError"),
}

__all__ = ["load", "save", "to_onnx", "verify", "legalize", "check", "Graph", "Node", "Value", "TensorType",
           "Model", "VerifyResult", "snapshot", "report_html", "overlays", "LegalizeError", "BadInput", "UsageError",
           "NotLegal", "Result", "__version__"]


def __getattr__(name: str):
    if name not in _API:
        # A submodule, as ``legalizer.api`` was when the package imported it eagerly.
        if not name.startswith("__"):
            try:
                return import_module(f".{name}", __name__)
            except ModuleNotFoundError as e:
                if e.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module 'legalizer' has no attribute '{name}'")
    module, attr = _API[name]
    value = getattr(import_module(module, __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
