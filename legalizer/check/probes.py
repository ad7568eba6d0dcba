"""Runners that give a model's intermediate values, for localization (``localize.py``)
and reduction (``reduce.py``): one interface over onnxruntime, LiteRT and IREE.

    probe.values(feeds)          -> {value name: array}: every value the runtime can give
    probe.values(feeds, names)   -> just those (IREE: the module cut at them)
    probe.runs                   -> how many times the model was run (IREE: compiled and run)

- ONNX (``OrtProbe``): the values are added to the graph's outputs, as Polygraphy's
  ``--onnx-outputs mark all`` does (top-level values; a subgraph's stay inside it).
- TFLite (``LiteRTProbe``): LiteRT keeps every tensor of the run
  (``experimental_preserve_all_tensors``), by tensor name (subgraph 0).
- TOSA MLIR (``IreeProbe``): ``@main`` is cut at the values asked for (it returns them,
  and IREE drops the ops none of them needs), then compiled and run. Names are the SSA
  names of the module as MLIR prints it (``text``), without ``%``.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx


class Probe:
    """One model on its runtime. ``runtime`` names it in reports."""

    runtime = ""

    def __init__(self) -> None:
        self.runs = 0

    def values(self, feeds: Mapping[str, np.ndarray], names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        raise NotImplementedError


class OrtProbe(Probe):
    """An ONNX model (a ModelProto, external data loaded) on onnxruntime."""

    runtime = "onnxruntime"

    def __init__(self, model: onnx.ModelProto, provider_list: Sequence[str]):
        super().__init__()
        self.model, self.provider_list = model, list(provider_list)
        self._sessions: Dict[tuple, object] = {}

    def all_names(self) -> List[str]:
        """The top-level values in graph order (each node's outputs), then the outputs."""
        names = [o for n in self.model.graph.node for o in n.output if o]
        return list(dict.fromkeys(names + [o.name for o in self.model.graph.output]))

    def _session(self, names: Sequence[str]):
        from .ort_session import session

        key = tuple(names)
        if key not in self._sessions:
            m = onnx.ModelProto()
            m.CopyFrom(self.model)
            declared = {o.name for o in m.graph.output}
            for name in names:
                if name not in declared:  # untyped: onnxruntime infers it
                    m.graph.output.append(onnx.ValueInfoProto(name=name))
            self._sessions = {key: session(m, self.provider_list)}  # one at a time: they hold every value
        return self._sessions[key]

    def sizes(self, feeds, names: Sequence[str]) -> Dict[str, int]:
        """The bytes each value of ``names`` takes at most (its element count times 8),
        from one run that gives out the value's ``Shape`` only: onnxruntime frees the
        values themselves as it goes, so this run takes what a plain run takes."""
        from .ort_session import session

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        del m.graph.output[:]
        outs = []
        for k, name in enumerate(names):
            out = f"{name}@size{k}"
            m.graph.node.append(onnx.helper.make_node("Shape", [name], [out]))
            m.graph.output.append(onnx.ValueInfoProto(name=out))
            outs.append(out)
        self._sessions = {}
        self.runs += 1
        got = session(m, self.provider_list).run(outs, dict(feeds))
        return {n: 8 * int(np.prod(s)) for n, s in zip(names, got)}

    def values(self, feeds, names=None):
        names = self.all_names() if names is None else list(names)
        sess = self._session(names)
        want = [o.name for o in sess.get_outputs()]
        self.runs += 1
        got = sess.run(want, dict(feeds))
        asked = set(names)
        return {n: v for n, v in zip(want, got) if n in asked and isinstance(v, np.ndarray)}


class LiteRTProbe(Probe):
    """A .tflite model on LiteRT (its primary subgraph), every tensor kept."""

    runtime = "LiteRT"

    def __init__(self, path, kernels: str = "builtin"):
        import warnings

        from .litert import LiteRTModel

        super().__init__()
        with warnings.catch_warnings():  # "intended for debugging purposes only": that is what it is for
            warnings.simplefilter("ignore", UserWarning)
            self.model = LiteRTModel(str(path), kernels=kernels, keep_tensors=True)

    def values(self, feeds, names=None):
        self.model.run(feeds, 0)
        self.runs += 1
        tensors = self.model.tensors()
        return tensors if names is None else {n: tensors[n] for n in names if n in tensors}

    def unresolved_custom_op(self) -> str:
        return self.model.unresolved_custom_op()

    def input_names(self) -> List[str]:
        return [s.name for s in self.model.input_specs()]

    def output_names(self) -> List[str]:
        return self.model.output_names()

    def producers(self) -> Dict[str, str]:
        """The op that computes each tensor, by tensor name."""
        it = self.model.interpreter
        names = {d["index"]: d["name"] for d in it.get_tensor_details()}
        return {names[int(t)]: op["op_name"] for op in it._get_ops_details() for t in op["outputs"]  # noqa: SLF001
                if int(t) in names}


class IreeProbe(Probe):
    """A TOSA module's ``@main`` on IREE (llvm-cpu), cut at the values asked for;
    arguments are fed in order."""

    runtime = "IREE llvm-cpu"

    def __init__(self, text: str, contained: bool = False):
        super().__init__()
        self.text, self.contained = text, contained

    def all_names(self) -> List[str]:
        """Every op result of ``@main`` that is a tensor, constants left out (the same in
        any run), in the module's order."""
        from .iree_run import parse

        module = parse(self.text)
        with module.context:
            return [v.get_name()[1:] for op in main_func(module).regions[0].blocks[0].operations
                    if op.operation.name not in ("tosa.const", "tosa.const_shape", "arith.constant")
                    for v in op.results if str(v.type).startswith("tensor<")]

    def values(self, feeds, names=None):
        from .iree_run import run, run_contained

        names = self.all_names() if names is None else list(names)
        if not names:
            return {}
        self.runs += 1
        text = cut(self.text, names)
        got = run_contained(text, list(feeds.values())) if self.contained else run(text, list(feeds.values()))
        return dict(zip(names, got))


class ChildProbe(Probe):
    """A probe (``factory(*args, **kwargs)``: ``OrtProbe``, ``LiteRTProbe``,
    ``IreeProbe``) built and run in the child process (``child.py``); ``model`` names
    it when the child faults."""

    def __init__(self, factory, *args, model: str = "the model", **kwargs):
        from .child import Remote

        super().__init__()
        self.runtime = factory.runtime
        self.remote = Remote(factory, *args, model=model, runtime=factory.runtime, **kwargs)

    def values(self, feeds, names=None):
        self.runs += 1
        return dict(self.remote.call("values", dict(feeds), None if names is None else list(names)))

    def call(self, method: str, *args):
        return self.remote.call(method, *args)

    def close(self) -> None:
        self.remote.close()


def printed(text: str) -> str:
    """``text`` as MLIR prints it, locations kept: the SSA names probes and the IR share."""
    from .iree_run import parse

    return parse(text).operation.get_asm(enable_debug_info=True)


def main_func(module):
    """The ``@main`` function of a module IREE's MLIR bindings parsed (TosaError if none)."""
    from iree.compiler import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    from .iree_run import TosaError
    raise TosaError("the module has no @main")


def cut(text: str, names: Sequence[str]) -> str:
    """``text`` with ``@main`` returning the values ``names`` (SSA names without ``%``,
    as MLIR prints ``text``) instead of its results."""
    from iree.compiler import ir

    from .iree_run import TosaError, parse

    module = parse(text)
    with module.context, ir.Location.unknown():
        main = main_func(module)
        block = main.regions[0].blocks[0]
        by_name = {a.get_name()[1:]: a for a in block.arguments}
        ops = list(block.operations)
        for op in ops:
            by_name.update((v.get_name()[1:], v) for v in op.results)
        missing = [n for n in names if n not in by_name]
        if missing:
            raise TosaError(f"no value %{missing[0]} in @main")
        values = [by_name[n] for n in names]
        ret = ops[-1]
        ir.Operation.create(ret.operation.name, operands=values, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.operation.erase()
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs),
                                                                               [v.type for v in values]))
        if not module.operation.verify():
            raise TosaError("the module cut at the probed values does not verify")
        return str(module)
