"""The legal form verified on the shapes the model has at run time.

The verifier judges the shapes inference gives, and a ``?`` or an unknown rank there
proves nothing: ``Add(tensor<*xf32>, tensor<f32>)`` passes, and at run time its operands
are ``1x1x1x1`` and a scalar, which TOSA rejects. So the check also runs the legalized
model once (the first binding it compared) with the shape of every operand and result of
each broadcasting node that is not fully static added as an output (through ``Shape``
nodes: only the shapes come back, never the tensors, whatever the model's size), puts
those shapes on the nodes and verifies them under the target's profile.

Top-level nodes only: a value inside a subgraph (a Loop's body) is no graph output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import first_line
from ..kinds.onnx.importer import import_model
from ..ir.graph import OP, Value
from ..ir.types import shape_str
from ..oprules import RuleLookup, builtin_rules
from ..verifier import verify
from ..verifier.diagnostics import Diagnostic

STAGE = "run time"
_PREFIX = "legalize_runtime_shape_"


@dataclass
class RuntimeShapes:
    dims: Dict[str, int]  # the binding the shapes were taken at
    nodes: int = 0  # broadcasting nodes whose shapes were taken
    violations: List[Diagnostic] = field(default_factory=list)
    error: str = ""  # why the shapes could not be taken (not a failure of the check)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        out = {"dims": self.dims, "nodes": self.nodes, "ok": self.ok,
               "violations": [dict(d.to_json(), text=describe(d)) for d in self.violations]}
        if self.error:
            out["error"] = self.error
        return out


def describe(d: Diagnostic) -> str:
    """The diagnostic with the run-time shapes it was found on."""
    shapes = ", ".join(f"'{shape_str(s)}'" for s in d.operand_shapes)
    return f"{d} (at run time: ({shapes}) -> '{shape_str(d.result_shape)}')"


def _dynamic(values: Sequence[Optional[Value]]) -> bool:
    return any(v is not None and not v.type.is_static for v in values)


def verify_run_time(legalized, feeds: Mapping[str, np.ndarray], dims: Dict[str, int], profile: str,
                    provider_list: Sequence[str]) -> RuntimeShapes:
    """Run ``legalized`` (a ModelProto or a path) on ``feeds`` and verify its broadcasting
    nodes that are not fully static under ``profile`` with the shapes they had."""
    out = RuntimeShapes(dict(dims))
    path = None if isinstance(legalized, onnx.ModelProto) else Path(legalized)
    proto = legalized if path is None else onnx.load_model(str(path), load_external_data=False)
    model = import_model(proto, path.parent if path is not None else None)
    lookup = RuleLookup(model.graph, builtin_rules())
    wanted: Dict[str, Value] = {}
    checked = set()
    for node in model.graph.nodes():
        if node.kind == OP and lookup(node) is not None and _dynamic(node.inputs + node.outputs):
            checked.add(node.label)
            for v in node.inputs + node.outputs[:1]:
                if v is not None and v.name:
                    wanted.setdefault(v.name, v)
    out.nodes = len(checked)
    if not wanted:
        return out
    try:
        shapes = _run_shapes(proto, path, list(wanted), feeds, provider_list)
    except Exception as e:  # noqa: BLE001 - onnxruntime's words; the comparison itself ran
        out.error = f"the run-time shapes could not be taken: {first_line(e)}"
        return out
    for name, shape in shapes.items():
        v = wanted[name]
        v.type = v.type.with_shape(shape)
    # The nodes whose shapes were taken (the others were verified before the check).
    out.violations = [d for d in verify(model.graph, profile, stage=STAGE).violations
                      if not d.graph and d.node in checked]
    return out


def _run(model, feeds, provider_list) -> list:
    """The outputs of one run of ``model`` (a ModelProto or a path) on onnxruntime, in
    the child process (``child.py``), in order."""
    from .child import ChildRunner
    from .ort_session import OrtRunner

    with ChildRunner(OrtRunner, model, list(provider_list), model="the legalized model") as runner:
        return list(runner.infer(feeds).values())


def _run_shapes(proto: onnx.ModelProto, path: Optional[Path], names: List[str], feeds, provider_list):
    """{value name: its shape} of ``names``, from one run of a copy of ``proto`` that
    outputs each value's ``Shape``."""
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    outputs = []
    for k, name in enumerate(names):
        out = f"{_PREFIX}{k}"
        probe.graph.node.append(helper.make_node("Shape", [name], [out], name=out))
        outputs.append(helper.make_tensor_value_info(out, onnx.TensorProto.INT64, [None]))
    del probe.graph.output[:]
    probe.graph.output.extend(outputs)
    if path is None:
        got = _run(probe, feeds, provider_list)
    else:
        # Beside the model, so that its external data files resolve; named as every
        # temporary file of a run, so that one a SIGKILL leaves is removed by the next.
        from ..atomic_files import sweep_stale, temp_name

        sweep_stale(path.parent)
        tmp = str(path.with_name(temp_name(f"{path.name}.shapes")))
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            onnx.save_model(probe, tmp)
            got = _run(Path(tmp), feeds, provider_list)
        finally:
            os.unlink(tmp)
    return {name: tuple(int(d) for d in s) for name, s in zip(names, got)}
