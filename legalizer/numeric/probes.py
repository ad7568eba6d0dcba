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


# Localization compares the values a chunk at a time: at most this many bytes of them (or
# one value, if bigger) are held at once, on each side, so that its memory stays near a
# plain run's (a model whose every intermediate is large would hold them all).
CHUNK_BYTES = 64 << 20
# Content matching compares this many elements of a value at most (evenly spaced, the same
# positions for every value of a size): a bounded summary of each, held for all at once.
SKETCH = 4096


def chunks(order: Sequence[str], sizes: Mapping[str, int], budget: int = CHUNK_BYTES) -> List[List[str]]:
    """``order`` cut into runs of names whose ``sizes`` add up to ``budget`` at most (a
    bigger value alone); a name without a size (not a tensor) is left out."""
    out: List[List[str]] = []
    chunk: List[str] = []
    held = 0
    for name in order:
        if name not in sizes:
            continue
        size = sizes[name]
        if chunk and held + size > budget:
            out.append(chunk)
            chunk, held = [], 0
        chunk.append(name)
        held += size
    if chunk:
        out.append(chunk)
    return out


def sketch(a: np.ndarray) -> np.ndarray:
    """``a`` flattened, or ``SKETCH`` of its elements evenly spaced when it has more."""
    flat = np.asarray(a).reshape(-1)
    if flat.size <= SKETCH:
        return np.array(flat)
    return flat[np.linspace(0, flat.size - 1, SKETCH).astype(np.int64)]


class Probe:
    """One model on its runtime. ``runtime`` names it in reports."""

    runtime = ""

    def __init__(self) -> None:
        self.runs = 0

    def values(self, feeds: Mapping[str, np.ndarray], names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def sketches(self, feeds: Mapping[str, np.ndarray], names: Sequence[str], sizes: Mapping[str, int],
                 budget: int = CHUNK_BYTES) -> Dict[str, list]:
        """For content matching: each float value of ``names`` as [its element count,
        its ``sketch``], from runs that give out a chunk of them at a time."""
        out: Dict[str, list] = {}
        for chunk in chunks(names, sizes, budget):
            for n, a in self.values(feeds, chunk).items():
                a = np.asarray(a)
                if a.dtype.kind == "f":
                    out[n] = [int(a.size), sketch(a)]
        return out


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
            self._sessions = {}  # one at a time, without an arena: each holds a chunk's values after its run
            self._sessions = {key: session(m, self.provider_list, arena=False)}
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
        got = session(m, self.provider_list, arena=False).run(outs, dict(feeds))
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
    """A .tflite model on LiteRT (its primary subgraph). The values asked for are made
    the subgraph's outputs (a copy of the model, its other tensors' buffers reused as
    LiteRT plans them), so that a run holds those values, not every one; a model whose
    weights lie outside its flatbuffer (buffer offsets) keeps every tensor instead."""

    runtime = "LiteRT"

    def __init__(self, path, kernels: str = "builtin"):
        from .litert import LiteRTModel

        super().__init__()
        self.path, self.kernels = str(path), kernels
        self.model = LiteRTModel(self.path, kernels=kernels)
        self._table = None  # the model's tables, read when values are first asked for
        self._index: Dict[str, int] = {}  # tensor name -> index (names two tensors share left out)
        self._ops: List[str] = []

    def _read(self):
        import tflite

        from ..tflite_schema import read

        if self._table is None:
            with open(self.path, "rb") as f:
                buf = f.read()
            self._table = read(tflite.Model.GetRootAs(buf, 0))
            sg = self._table.fields["subgraphs"][0]
            names = [t.fields.get("name", "") for t in sg.fields["tensors"]]
            counts: Dict[str, int] = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            self._index = {n: i for i, n in enumerate(names) if counts[n] == 1}
            by_index = dict(enumerate(names))
            outs = [by_index.get(int(t)) for op in sg.fields.get("operators", []) for t in op.fields.get("outputs", [])
                    if int(t) >= 0]
            outs += [by_index.get(int(t)) for t in sg.fields.get("outputs", [])]
            self._ops = [n for n in dict.fromkeys(outs) if n in self._index]
        return self._table

    def all_names(self) -> List[str]:
        """The op results of subgraph 0 in op order, then its outputs (unique names)."""
        self._read()
        return list(self._ops)

    def sizes(self, feeds, names: Sequence[str]) -> Dict[str, int]:
        """The bytes of each value of ``names``, from the tensors' shapes after one plain
        run (LiteRT reuses the buffers, so this run takes what the check's does)."""
        self.model.run(feeds, 0)
        self.runs += 1
        want = set(names)
        return {d["name"]: int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
                for d in self.model.interpreter.get_tensor_details() if d["name"] in want}

    def _cut(self, names: Sequence[str]) -> Optional[bytes]:
        """The model with ``names`` as subgraph 0's outputs, or None where its weights lie
        outside the flatbuffer (a copy would lose them)."""
        from ..tflite_schema import FbTable, serialize

        table = self._read()
        if any(int(b.fields.get("offset", 0) or 0) > 1 for b in table.fields.get("buffers", [])):
            return None
        sg = table.fields["subgraphs"][0]
        outputs = [self._index[n] for n in names]
        # LiteRT runs every op of the plan, needed or not: the ops after the last one
        # that computes an asked-for value are left out (a chunk early in the model no
        # longer costs a whole run; those before stay, whatever they do)
        ops = sg.fields.get("operators", [])
        wanted, last = set(outputs), -1
        for k, op in enumerate(ops):
            if not wanted.isdisjoint(int(t) for t in op.fields.get("outputs", [])):
                last = k
        cut_sg = FbTable(sg.type, dict(sg.fields, outputs=np.array(outputs, np.int32), operators=ops[:last + 1]))
        fields = dict(table.fields, subgraphs=[cut_sg] + list(table.fields["subgraphs"][1:]))
        fields.pop("signature_defs", None)  # subgraph 0 run as itself, not through a signature's names
        return serialize(FbTable(table.type, fields), initial_size=1 << 20)

    def values(self, feeds, names=None):
        import warnings

        from .litert import LiteRTModel

        self._read()
        names = [n for n in (self.all_names() if names is None else names) if n in self._index]
        if not names:
            return {}
        self.runs += 1
        content = self._cut(names)
        with warnings.catch_warnings():  # "intended for debugging purposes only": that is what it is for
            warnings.simplefilter("ignore", UserWarning)
            if content is None:
                model = LiteRTModel(self.path, kernels=self.kernels, keep_tensors=True)
                model.run(feeds, 0)
                got = model.tensors()
            else:
                got = LiteRTModel(content, kernels=self.kernels).run(feeds, 0)
        return {n: np.asarray(got[n]) for n in names if n in got}  # (LiteRT gave copies)

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
