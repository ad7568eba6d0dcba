"""Ranks of contrib ops' results from onnxruntime's symbolic shape inference.

ONNX's shape inference knows nothing of onnxruntime's contrib ops (domain
``com.microsoft``: Gelu, FusedMatMul, SkipLayerNormalization, ...), so their results
and all that follows them stay unranked. onnxruntime's ``symbolic_shape_infer`` has
shape functions for many of them. It runs here in the bounded helper (it is sympy over
untrusted input) without guessing ranks (``guess_output_rank`` would give an unknown
op its first operand's rank: LSTM's Y has rank 4, not 3) and without merging
conflicting symbols (``auto_merge`` takes ``a`` and ``b`` to be equal where they
broadcast, which a dim that may be 1 is not). Its own entry point writes
``sym_shape_infer_temp.onnx`` into the working folder when an op stays unknown, so the
same steps run here without that, keeping what was inferred before it stopped.

A result gets a type only where it has none; a dim keeps a number, or a symbol of the
model's own inputs (which the inference carries through its shape functions), and is
``?`` otherwise.
"""

from __future__ import annotations

from typing import Callable, Set

from onnx import GraphProto, ModelProto, ValueInfoProto

from ...ir.graph import OP, Graph
from ...ir.types import TensorType

CONTRIB_DOMAINS = ("com.microsoft",)
INFER_MEMORY = 1 << 30
INFER_TIMEOUT_S = 120.0


def wanted(model: ModelProto, graph: Graph) -> bool:
    """Whether a contrib op's result is still unranked (the model imports the domain)."""
    if not any(o.domain in CONTRIB_DOMAINS for o in model.opset_import):
        return False
    return any(n.kind == OP and n.domain in CONTRIB_DOMAINS and any(v.type.shape is None and v.name for v in n.outputs)
               for n in graph.walk())


def _infer_here(serialized: bytes) -> bytes:
    """In the helper: a GraphProto whose value_info holds every type the symbolic
    inference knew when it finished or stopped."""
    try:  # it needs sympy, which onnxruntime's wheel does not bring (torch's does): without it, no ranks
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        return b""
    model = ModelProto.FromString(serialized)
    sym = SymbolicShapeInference(2**31 - 1, False, False, 0)
    try:
        sym._preprocess(model)
        while sym.run_:
            sym._infer_impl()
    except Exception:  # noqa: BLE001 - an op it cannot take, a conflict: what it knew so far stands
        pass
    out = GraphProto()
    for vi in getattr(sym, "known_vi_", {}).values():
        if isinstance(vi, ValueInfoProto):
            out.value_info.append(vi)
    return out.SerializeToString()


def contrib_ranks(graph: Graph, serialized: bytes, tensor_type: Callable) -> int:
    """Give the unranked values of ``graph`` (and its subgraphs) the types onnxruntime's
    symbolic inference found for them; return how many got one. ``serialized`` is the
    model, its large weights left out; ``tensor_type`` reads a TypeProto (the ONNX
    importer's)."""
    from ... import bounded_helper

    try:
        found = GraphProto.FromString(bounded_helper.call(_infer_here, serialized, memory=INFER_MEMORY,
                                                   timeout=INFER_TIMEOUT_S))
    except bounded_helper.Failed:
        return 0
    known = {vi.name: vi for vi in found.value_info}
    symbols: Set[str] = {d for n in graph.inputs for v in n.outputs for d in (v.type.shape or ()) if isinstance(d, str)}
    made = 0
    for g in graph.graphs():
        for node in g.nodes():
            for v in node.outputs:
                if v.type.shape is not None or v.name not in known:
                    continue
                try:
                    t, _ = tensor_type(known[v.name].type, f"value '{v.name}'")
                except Exception:  # noqa: BLE001 - a type the inference made up is no input error
                    continue
                if t.shape is None:
                    continue
                dims = tuple(d if isinstance(d, int) or d in symbols else None for d in t.shape)
                v.type = TensorType(v.type.dtype or t.dtype, dims)
                made += 1
    return made

