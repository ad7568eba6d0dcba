"""Specialize an ONNX model's dynamic dims to static sizes, for a backend that takes static
shapes only (Qualcomm's HTP through onnxruntime's QNN EP: a node with a dynamic shape is
not placed on it).

    specialize_onnx(model, sizes, default=1) -> Specialized(bound, shapes_set, folded)

Every dynamic dim of the graph's inputs gets the size the user bound (``--dim``,
``--input-shape``: ``sizes``, keyed as the check keys dims: the symbol, or ``input[axis]``)
or ``default``. The shape arithmetic that is then constant (``Shape`` and what computes on
its result, up to a ``Reshape``'s target) is folded by onnxruntime's own constant folding
(its basic graph optimizations, which keep to ONNX ops), and the model is imported again,
its shapes inferred at the bound sizes.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Mapping

import onnx

from ..errors import BadInput, first_line
from ..model import Model
from .inputs import dim_key


@dataclass
class Specialized:
    bound: Dict[str, int] = field(default_factory=dict)  # dim key -> size
    shapes_set: int = 0  # input dims made static
    folded: int = 0  # Shape ops folded into constants


def specialize_onnx(model: Model, sizes: Mapping[str, int], default: int = 1) -> Specialized:
    import onnxruntime as ort

    from ..exporters.as_onnx import to_onnx
    from ..importers.onnx import import_model

    out = Specialized()
    proto = to_onnx(model)
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        if not vi.type.tensor_type.HasField("shape"):
            raise BadInput(f"input '{vi.name}' has no known rank: its shape cannot be made static")
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            key = d.dim_param or dim_key(vi.name, axis)
            size = int(sizes.get(key, sizes.get(dim_key(vi.name, axis), default)))
            out.bound[key] = size
            d.Clear()
            d.dim_value = size
            out.shapes_set += 1
    if not out.bound:
        return out
    for vi in proto.graph.output:  # (inferred anew at the sizes)
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    before = sum(n.op_type == "Shape" for n in proto.graph.node)
    with tempfile.TemporaryDirectory() as tmp:
        where = os.path.join(tmp, "static.onnx")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = where
        opts.log_severity_level = 4
        try:
            ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime's own words are the reason
            raise BadInput(f"the model does not load at the static sizes {_sizes(out.bound)}: {first_line(e)}") from None
        folded = onnx.load(where)
    out.folded = before - sum(n.op_type == "Shape" for n in folded.graph.node)
    new = import_model(folded, model.base_dir)
    model.graph, model.proto = new.graph, new.proto
    return out


def _sizes(bound: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in bound.items())
