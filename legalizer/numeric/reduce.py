"""``--reduce PATH``: the smallest subgraph of a model that still shows what is wrong
with it (a divergence from the reference, or a verifier violation), for a bug report.

Delta debugging over nodes, as ``polygraphy debug reduce`` does: ``ddmin`` splits the
nodes into chunks and keeps a chunk, or the rest without one, whenever that subgraph
still fails, until no single node can go. A subgraph of nodes S reads the values S uses
but does not make as inputs, captured from the full run (so every upstream difference
is gone), and gives out the values S makes and does not use itself.

- A divergence (after ``localize``): the subgraph fails when one of its outputs differs
  from the reference's value beyond the tolerances. The search starts from the culprit
  and the ops it is computed through, and ends with one node where its operands match.
  Written: the candidate's subgraph (``.onnx`` or TOSA ``.mlir``), its inputs
  (``<stem>.inputs.npz``), and the reference's part: for an ONNX reference its subgraph
  between the same values (``<stem>.reference.onnx``; the three together rerun with
  ``--verify-only --against <stem>.reference.onnx --input <stem>.inputs.npz``), for a
  TFLite reference its values of the outputs (``<stem>.expected.npz``).
- A violation: the subgraph fails when the verifier still reports the violation's code
  at its node; inputs keep their declared types (symbols included), nothing is run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper

from .child import RunFault
from .localize import Localization, Step, compare_value, onnx_steps, steps_of
from .runtimes import MODULE, ONNX, runner_for
from .settings import CheckSettings

MAX_TESTS = 400  # subgraphs one reduction tries at most


@dataclass
class Reduced:
    what: str  # what the subgraph still shows
    nodes: List[str]  # the labels of its nodes
    tests: int  # subgraphs tried
    files: Dict[str, str] = field(default_factory=dict)  # model, reference, inputs, expected -> path
    note: str = ""

    def to_json(self) -> dict:
        out = {"what": self.what, "nodes": list(self.nodes), "tests": self.tests, "files": dict(self.files)}
        if self.note:
            out["note"] = self.note
        return out


def ddmin(items: Sequence, fails: Callable[[List], bool], max_tests: int = MAX_TESTS) -> Tuple[List, int]:
    """A 1-minimal sublist of ``items`` (which fail) that still fails, and the tests run
    (Zeller's ddmin; ``fails`` is asked at most ``max_tests`` times, then the smallest
    failing list found is kept)."""
    items, n, tests, seen = list(items), 2, 0, {}

    def test(sub: List) -> bool:
        nonlocal tests
        key = tuple(id(x) for x in sub)
        if key not in seen:
            tests += 1
            seen[key] = tests <= max_tests and fails(sub)
        return seen[key]

    while len(items) >= 2 and tests < max_tests:
        size = math.ceil(len(items) / n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            if test(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if all(x is not c for c in chunk)]
                if len(chunks) > 2 and test(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items, tests


def _boundary(steps: Sequence[Step], consts: Mapping[str, object] = {}) -> Tuple[List[str], List[str]]:
    """The values ``steps`` read but do not make (constants aside), and those they make
    but do not read, in order."""
    made = {v for s in steps for v in s.outputs}
    read = list(dict.fromkeys(x for s in steps for x in s.inputs))
    inputs = [x for x in read if x not in made and x not in consts]
    outputs = [v for s in steps for v in s.outputs if v not in set(read)]
    return inputs, outputs


def search(steps: Sequence[Step], seed: Sequence[Step], fails: Callable[[List], bool]) -> Tuple[Optional[List], int]:
    """``ddmin`` from ``seed`` (from every step if the seed does not fail); None when
    not even the whole graph fails."""
    tests = 1
    if not fails(list(seed)):
        tests += 1
        if not fails(list(steps)):
            return None, tests
        seed = steps
    kept, more = ddmin(seed, fails)
    return kept, tests + more


class NothingToReduce(Exception):
    """Not even the whole graph shows it (the divergence needs more than one run)."""


def _found(searched: Tuple[Optional[List], int]) -> Tuple[List, int]:
    kept, tests = searched
    if kept is None:
        raise NothingToReduce(f"no subgraph shows it, not even the whole graph ({tests} tried)")
    return kept, tests


def _seed(steps: Sequence[Step], loc: Localization) -> List[Step]:
    """Where the search starts: the culprit's op and the unmatched ops it is computed
    through."""
    names = {s.node for s in loc.region} | {loc.culprit.node}
    return [s for s in steps if s.node in names]


def _still_differs(outputs: Sequence[str], got: Mapping[str, np.ndarray], loc: Localization,
                   settings: CheckSettings) -> bool:
    """Whether a matched output of a subgraph run differs from the reference's value."""
    _, ref, pairs = loc.values
    for v in outputs:
        r = pairs.get(v)
        if r is not None and r in ref and v in got:
            if not compare_value(v, got[v], ref[r], float(settings.rtol), float(settings.atol), False).ok:
                return True
    return False


def _inputs_of(names: Sequence[str], loc: Localization, feeds: Mapping[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """Captured values for a subgraph's inputs: the model's inputs, and the
    reference's values of matched ones (the truth, so that the subgraph shows its own
    error only); None if an input has no counterpart in the reference (its error
    would come from outside the subgraph)."""
    cand, ref, pairs = loc.values
    out = {}
    for x in names:
        if x in feeds:
            out[x] = np.asarray(feeds[x])
        elif x in pairs and pairs[x] in ref and x in cand:
            out[x] = np.asarray(ref[pairs[x]]).reshape(np.shape(cand[x]))
        else:
            return None
    return out


# -- ONNX ----------------------------------------------------------------------------------

def _onnx_sub(model: onnx.ModelProto, keep: Sequence[int], inputs: Sequence[Tuple[str, object]],
              outputs: Sequence[Tuple[str, object]]) -> onnx.ModelProto:
    """The model with the nodes ``keep`` (indices), ``inputs`` and ``atomic_files`` as
    (name, ``TypeProto``) pairs, and the initializers those nodes read."""
    g = model.graph
    nodes = [g.node[i] for i in keep]
    read = {x for n in nodes for x in n.input} | _outer_names(nodes)
    graph = helper.make_graph(nodes, f"{g.name or 'main'}_reduced", [_vi(n, t) for n, t in inputs],
                              [_vi(n, t) for n, t in outputs], [t for t in g.initializer if t.name in read])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub


def _vi(name: str, tp) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto(name=name)
    vi.type.CopyFrom(tp)
    return vi


def _outer_names(nodes) -> set:
    """Names the subgraphs of ``nodes`` read from outside (If/Loop/Scan bodies)."""
    out = set()
    for n in nodes:
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out |= {x for m in g.node for x in m.input} | _outer_names(g.node)
    return out


def _array_type(a: np.ndarray):
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))


def _ort_run(sub: onnx.ModelProto, feeds: Mapping[str, np.ndarray], provider: str) -> Dict[str, np.ndarray]:
    """``sub`` run on the runtime that runs ONNX on ``provider`` (``runtimes.py``), in the
    child process (``child.py``)."""
    with runner_for(ONNX, provider).runner(sub, provider, what="a subgraph of the candidate") as runner:
        return runner.infer(feeds)


def _reference_slice(ref: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> List[int]:
    """The reference's nodes that compute ``atomic_files`` from ``inputs`` (and its
    initializers), in graph order; [] when they need any other value."""
    producer = {o: i for i, n in enumerate(ref.graph.node) for o in n.output}
    inits = {t.name for t in ref.graph.initializer}
    keep, todo, stop = set(), list(outputs), set(inputs) | inits | {""}
    while todo:
        x = todo.pop()
        if x in stop:
            continue
        if x not in producer:
            return []
        i = producer[x]
        if i not in keep:
            keep.add(i)
            n = ref.graph.node[i]
            todo += list(n.input) + sorted(_outer_names([n]))
    return sorted(keep)


def reduce_onnx(candidate: onnx.ModelProto, reference: onnx.ModelProto, loc: Localization, feeds,
                settings: CheckSettings, path: Path, *, force: bool = False,
                protect: Sequence[Path] = ()) -> Reduced:
    """The smallest subgraph of ``candidate`` whose outputs still differ from the
    reference's values, written at ``path`` with its reference part and inputs."""
    steps = onnx_steps(candidate)
    index = {id(s): i for i, s in enumerate(steps)}
    cand = loc.values[0]

    def build(sub: List[Step]):
        names, outs = _boundary(sub, {t.name for t in candidate.graph.initializer})
        arrays = _inputs_of(names, loc, feeds)
        if arrays is None or any(o not in cand for o in outs):
            return None
        model = _onnx_sub(candidate, sorted(index[id(s)] for s in sub),
                          [(n, _array_type(a)) for n, a in arrays.items()],
                          [(o, _array_type(cand[o])) for o in outs])
        return model, arrays, outs

    def fails(sub: List[Step]) -> bool:
        built = build(sub)
        if built is None:
            return False
        model, arrays, outs = built
        try:
            return _still_differs(outs, _ort_run(model, arrays, settings.provider), loc, settings)
        except RunFault:  # the child crashed or ran out of its limits: the reduction stops, and says why
            raise
        except Exception:  # noqa: BLE001 - a subgraph onnxruntime rejects does not show it
            return False

    kept, tests = _found(search(steps, _seed(steps, loc), fails))
    model, arrays, outs = build(kept)
    result = Reduced(f"value '{loc.culprit.value}' differs from the reference", [s.node for s in kept], tests)
    ref_outs = [loc.values[2][o] for o in outs]
    ref_ins = [loc.values[2].get(n, n) for n in arrays]
    keep = _reference_slice(reference, ref_ins, ref_outs)
    written = {"model": (path, model)}
    if keep:
        ref_model = _onnx_sub(reference, keep, [(r, _array_type(a)) for r, a in zip(ref_ins, arrays.values())],
                              [(r, _array_type(loc.values[1][r])) for r in ref_outs])
        written["reference"] = (_beside(path, SIDE_FILES["reference"]), ref_model)
    else:
        result.note = "the reference computes these outputs from other values: its part is not written"
    _write(result, written, {"inputs": (_beside(path, SIDE_FILES["inputs"]), arrays)}, force, protect)
    return result


def reduce_onnx_violation(candidate: onnx.ModelProto, graph, code: str, node: str, profile: str, path: Path, *,
                          force: bool = False, protect: Sequence[Path] = ()) -> Reduced:
    """The smallest subgraph of ``candidate`` (``graph`` its IR, for the declared types)
    in which the verifier still reports ``code`` at ``node``."""
    from ..kinds.onnx.importer import import_model
    from ..verifier import verify

    steps = onnx_steps(candidate)
    index = {id(s): i for i, s in enumerate(steps)}

    def build(sub: List[Step]):
        names, outs = _boundary(sub, {t.name for t in candidate.graph.initializer})
        types = [_ir_type(graph, n) for n in names + outs]
        if any(t is None for t in types):
            return None
        return _onnx_sub(candidate, sorted(index[id(s)] for s in sub), list(zip(names, types[:len(names)])),
                         list(zip(outs, types[len(names):])))

    def fails(sub: List[Step]) -> bool:
        model = build(sub)
        if model is None:
            return False
        try:
            found = verify(import_model(model, None).graph, profile)
        except Exception:  # noqa: BLE001 - a subgraph the importer rejects does not show it
            return False
        return any(d.code == code and d.node == node for d in found.violations)

    kept, tests = _found(search(steps, [s for s in steps if s.node == node], fails))
    result = Reduced(f"violation {code} at node '{node}'", [s.node for s in kept], tests)
    _write(result, {"model": (path, build(kept))}, {}, force, protect)
    return result


def _ir_type(graph, name: str):
    """The ONNX TypeProto of IR value ``name`` (its dtype and dims, symbols kept)."""
    from ..ir.dtypes import elem_type

    v = graph.value(name)
    if v is None or v.type.dtype is None:
        return None
    shape = None if v.type.shape is None else [d if isinstance(d, (int, str)) else None for d in v.type.shape]
    return helper.make_tensor_type_proto(elem_type(v.type.dtype), shape)


# -- TOSA MLIR -------------------------------------------------------------------------------

class _Module:
    """A printed module's ``@main``: each op's text, value types, alias lines."""

    def __init__(self, text: str):
        from ..kinds.mlir.importer import parse_mlir
        from .iree_run import parse
        from .iree_run import main_func

        self.text = text
        self.graph = parse_mlir(text).graph
        lines = text.splitlines()
        self.aliases = [ln for ln in lines if ln.startswith("#") or ln.startswith("!")]
        nodes = [n for n in self.graph.nodes() if n.proto is not None and getattr(n.proto, "line", None)]
        starts = sorted(n.proto.line for n in nodes)
        if not starts:
            raise NothingToReduce("@main has no ops")
        end = next(i + 1 for i, ln in enumerate(lines) if i + 1 > starts[-1]  # @main's return
                   and ('"func.return"' in ln or ln.strip().startswith("return")))
        bounds = dict(zip(starts, starts[1:] + [end]))
        self.op_text = {v.name: "\n".join(lines[n.proto.line - 1:bounds[n.proto.line] - 1])
                        for n in nodes for v in n.outputs[:1]}
        self.consts = {v.name for n in nodes if n.kind != "op" for v in n.outputs}
        module = parse(text)
        with module.context:
            block = main_func(module).regions[0].blocks[0]
            values = list(block.arguments) + [v for op in block.operations for v in op.results]
            self.types = {v.get_name()[1:]: str(v.type) for v in values}

    def sub(self, steps: Sequence[Step]) -> Tuple[str, List[str], List[str]]:
        """A module whose ``@main`` runs ``steps``: the values they read are its
        arguments (constants are copied in), those they make and do not read its results."""
        inputs, outputs = _boundary(steps, self.consts)
        made = {v for s in steps for v in s.outputs}
        consts = [x for s in steps for x in s.inputs if x in self.consts and x not in made]
        body = [self.op_text[c] for c in dict.fromkeys(consts)] + [self.op_text[s.outputs[0]] for s in steps]
        args = ", ".join(f"%{x}: {self.types[x]}" for x in inputs)
        ins = ", ".join(self.types[x] for x in inputs)
        outs = ", ".join(self.types[x] for x in outputs)
        text = "\n".join(self.aliases + [
            '"builtin.module"() ({',
            f'  "func.func"() <{{function_type = ({ins}) -> ({outs}), sym_name = "main"}}> ({{',
            f"  ^bb0({args}):", *body,
            f'    "func.return"({", ".join("%" + x for x in outputs)}) : ({outs}) -> ()',
            "  }) : () -> ()", "}) : () -> ()"])
        return text, inputs, outputs


def reduce_mlir(text: str, loc: Localization, feeds, path: Path, settings: CheckSettings, *, force: bool = False,
                protect: Sequence[Path] = ()) -> Reduced:
    """The smallest part of a TOSA module (``text`` as MLIR prints it, the one
    localized) whose results still differ from the reference's values, run on IREE;
    written with its inputs and the reference's values of its results."""
    module = _Module(text)
    steps = steps_of(module.graph)
    args = dict(zip([n.output.name for n in module.graph.inputs], feeds.values()))

    def fails(sub: List[Step]) -> bool:
        sub_text, ins, outs = module.sub(sub)
        arrays = _inputs_of(ins, loc, args)
        if arrays is None or not any(o in loc.values[2] for o in outs):
            return False
        try:
            provider = settings.provider
            with runner_for(MODULE, provider).runner(sub_text, provider, what="a part of the module") as runner:
                got = dict(zip(outs, runner.infer(arrays).values()))
        except RunFault:
            raise
        except Exception:  # noqa: BLE001 - IREE rejects it: it does not show the divergence
            return False
        return _still_differs(outs, got, loc, settings)

    kept, tests = _found(search(steps, _seed(steps, loc), fails))
    sub_text, ins, outs = module.sub(kept)
    _, ref, pairs = loc.values
    result = Reduced(f"value '%{loc.culprit.value}' differs from the reference", [s.node for s in kept], tests)
    expected = {o: np.asarray(ref[pairs[o]]) for o in outs if o in pairs}
    _write(result, {"model": (path, sub_text)}, {"inputs": (_beside(path, SIDE_FILES["inputs"]), _inputs_of(ins, loc, args)),
                                                 "expected": (_beside(path, SIDE_FILES["expected"]), expected)}, force, protect)
    return result


def reduce_mlir_violation(text: str, code: str, node: str, profile: str, path: Path, *, force: bool = False,
                          protect: Sequence[Path] = ()) -> Reduced:
    """The smallest part of a TOSA module in which the verifier still reports ``code``
    at ``node`` (an op's label, ``%7``)."""
    from ..kinds.mlir.importer import parse_mlir
    from ..verifier import verify

    module = _Module(text)
    steps = steps_of(module.graph)

    def fails(sub: List[Step]) -> bool:
        try:
            found = verify(parse_mlir(module.sub(sub)[0]).graph, profile)
        except Exception:  # noqa: BLE001 - a part our importer cannot read does not show it
            return False
        return any(d.code == code and d.node == node for d in found.violations)

    kept, tests = _found(search(steps, [s for s in steps if s.node == node], fails))
    result = Reduced(f"violation {code} at node '{node}'", [s.node for s in kept], tests)
    _write(result, {"model": (path, module.sub(kept)[0])}, {}, force, protect)
    return result


# -- writing ------------------------------------------------------------------------------

# The files a reduction may write beside the reduced model ``r.onnx``: role -> suffix.
SIDE_FILES = {"reference": ".reference.onnx", "inputs": ".inputs.npz", "expected": ".expected.npz"}


def reduce_files(path: Path) -> List[Tuple[str, Path]]:
    """Every file ``--reduce path`` may write, as (what it is, path) pairs: checked, all
    of them, before the work (existence, never an input)."""
    return [("the reduced model (--reduce)", Path(path))] + [
        (f"the reduction's {role} (--reduce)", _beside(Path(path), suffix)) for role, suffix in SIDE_FILES.items()]


def _beside(path: Path, suffix: str) -> Path:
    """``r.onnx`` -> ``r<suffix>`` beside it."""
    name = path.name
    for ext in (".onnx", ".mlir", ".mlirbc"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return path.with_name(name + suffix)


def _write(result: Reduced, models: Dict[str, tuple], arrays: Dict[str, tuple], force: bool,
           protect: Sequence[Path]) -> None:
    """Write each file atomically (models: ModelProto or text; arrays: ``.npz``); none
    over a path in ``protect``."""
    from ..errors import UsageError
    from ..atomic_files import atomic_output

    todo = [(role, Path(p), obj) for role, (p, obj) in {**models, **arrays}.items()]
    for _, p, _ in todo:
        for q in protect:
            if q is not None and Path(q).exists() and p.exists() and p.resolve() == Path(q).resolve():
                raise UsageError(f"{p}: --reduce would replace the input model")
    for role, p, obj in todo:
        with atomic_output(p, force=force) as tmp:
            if isinstance(obj, onnx.ModelProto):
                tmp.write_bytes(obj.SerializeToString())
            elif isinstance(obj, str):
                tmp.write_text(obj + "\n", encoding="utf-8")
            else:
                with open(tmp, "wb") as f:
                    np.savez(f, **{k: np.asarray(v) for k, v in obj.items()})
        result.files[role] = str(p)
