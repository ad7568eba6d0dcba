"""Seeded property test of both targets against numpy's broadcasting.

Random elementwise nodes: 1 to 3 operands of ranks 0 to 5 (Add/Mul/Sub with 2, Where
with a bool condition and 2 values, Sum/Max with 1 to 3), each dim at random a static 1,
a static size > 1, an anonymous dynamic dim or a symbol (shared between operands, and
now and then placed where it clashes); now and then an operand is a constant, or the
same input twice. Then small graphs of such nodes, whose results feed each other.

Each model numpy can run is legalized to ``tosa`` and ``xla``, in the default mode and in
strict symbolic mode (``assume_dynamic_not_one``). The result must be legal under the
target's profile, pass onnx.checker's full check, and on onnxruntime, for random bindings
of its dynamic dims:
- compute numpy's result where numpy accepts the binding (strict mode: bindings with
  every dynamic dim > 1), with the target's legal form holding at run time too (xla:
  every operand of a broadcasting op has the result's shape; tosa: its rank);
- raise where numpy rejects it, as the original does: never compute something.
Strict mode emits no runtime broadcast check and elides each one the default mode emits.
A model numpy rejects whatever the bindings (two static dims that cannot broadcast) is
a violation: the run's exit status is 1, and nothing is legalized or written.

Plain ``random.Random`` seeds: the same cases on every run; a failure names its case,
its shapes and the binding. The default run takes one chunk of the cases (each chunk
takes every path); ``-m slow`` the others.
"""

import functools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.kinds.onnx.importer import import_model
from legalizer.pipeline import EXIT_VIOLATIONS, RunOptions, run
from runtime_forms import check_legal_at_run_time, probe, session
from slow import sample

SEED = 20240611
CASES = 800  # single-node models
GRAPHS = 80  # models of 2 to 5 nodes
CHUNKS = 8
BINDINGS = 6  # random bindings drawn per model and mode (duplicates dropped)
CPU = ["CPUExecutionProvider"]


OPS = [("Add", 2), ("Mul", 2), ("Sub", 2), ("Where", 3), ("Sum", 1), ("Sum", 2), ("Sum", 3),
       ("Max", 1), ("Max", 2), ("Max", 3)]
NUMPY = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Where": np.where,
         "Sum": lambda *a: functools.reduce(np.add, a), "Max": lambda *a: functools.reduce(np.maximum, a)}
F, B = TensorProto.FLOAT, TensorProto.BOOL

Dim = object  # int, a symbol (str) or None (anonymous)


def shape_str(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape) or "scalar"


@dataclass
class Net:
    """A model under test: nodes (op, operand names, result name) over graph inputs and
    constants; every dim of the result rank R lines up with ``skeleton``, a size per
    dim that every operand accepts there."""

    index: int
    skeleton: Tuple[int, ...]
    opset: int = 17
    inputs: Dict[str, Tuple[int, Tuple[Dim, ...]]] = field(default_factory=dict)
    consts: Dict[str, np.ndarray] = field(default_factory=dict)
    nodes: List[Tuple[str, List[str], str]] = field(default_factory=list)
    outputs: Dict[str, Tuple[Dim, ...]] = field(default_factory=dict)

    def shape(self, name: str) -> Tuple[Dim, ...]:
        return self.inputs[name][1] if name in self.inputs else tuple(self.consts[name].shape)

    def __str__(self) -> str:
        ins = ", ".join(f"{n}: {shape_str(s)}" for n, (_, s) in self.inputs.items())
        cs = ", ".join(f"{n}: const {shape_str(a.shape)}" for n, a in self.consts.items())
        body = "; ".join(f"{o} = {op}({', '.join(xs)})" for op, xs, o in self.nodes)
        outs = ", ".join(f"{n}: {shape_str(s)}" for n, s in self.outputs.items())
        return f"model {self.index} at opset {self.opset} ({ins}{', ' + cs if cs else ''}) {{{body}}} -> ({outs})"

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(
            [helper.make_node(op, xs, [o], name=f"n{k}") for k, (op, xs, o) in enumerate(self.nodes)], "g",
            [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in self.inputs.items()],
            [helper.make_tensor_value_info(n, F, list(s)) for n, s in self.outputs.items()],
            [numpy_helper.from_array(a, n) for n, a in self.consts.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return m

    def evaluate(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """numpy's results; ValueError where numpy rejects the shapes."""
        values = {**self.consts, **feeds}
        for op, xs, o in self.nodes:
            values[o] = NUMPY[op](*(values[x] for x in xs))
        return values

    def statically_rejected(self) -> bool:
        """numpy rejects every binding: with each dynamic dim 1 (which never makes
        numpy reject) the static dims still cannot broadcast."""
        try:
            self.evaluate({n: np.zeros(tuple(d if isinstance(d, int) else 1 for d in s), np.bool_ if t == B
                                       else np.float32) for n, (t, s) in self.inputs.items()})
            return False
        except ValueError:
            return True

    def dims(self):
        """(key, dim's place in the skeleton) of each dynamic input dim: a symbol's key
        is the symbol, an anonymous dim's its input and axis."""
        rank = len(self.skeleton)
        return [(d if d is not None else f"{n}[{a}]", a + rank - len(s))
                for n, (_, s) in self.inputs.items() for a, d in enumerate(s) if not isinstance(d, int)]

    def draw_binding(self, rng: random.Random, strict: bool) -> Dict[str, int]:
        """A size per dynamic dim: mostly 1 or the skeleton's size there (numpy accepts),
        sometimes any size (numpy may reject), rarely 0. Strict mode: sizes > 1 only."""
        binding: Dict[str, int] = {}
        for key, k in self.dims():
            if key in binding:
                continue
            choice = rng.choices(["one", "match", "any", "zero"], [0 if strict else 3, 5, 2, 0 if strict else 0.3])[0]
            binding[key] = {"one": 1, "match": self.skeleton[k], "zero": 0,
                            "any": rng.choice([2, 3, 4, 5] if strict else [1, 2, 3, 4, 5])}[choice]
        return binding

    def feeds(self, binding: Dict[str, int], rng: np.random.Generator) -> Dict[str, np.ndarray]:
        out = {}
        for n, (t, s) in self.inputs.items():
            shape = tuple(d if isinstance(d, int) else binding[d if d is not None else f"{n}[{a}]"]
                          for a, d in enumerate(s))
            out[n] = (np.asarray(rng.random(shape) < 0.5) if t == B
                      else np.asarray(rng.standard_normal(shape), np.float32))
        return out


class Shapes:
    """Random operand shapes for one model: right-aligned to a skeleton of rank R; some
    dims of the skeleton are mostly symbolic, so symbols get shared."""

    KINDS = ["one", "match", "other", "anon", "sym", "stray"]

    def __init__(self, rng: random.Random, rank: int):
        self.rng, self.rank = rng, rank
        self.skeleton = tuple(rng.choice([2, 3, 4]) for _ in range(rank))
        self.symbolic = [rng.random() < 0.4 for _ in range(rank)]

    def draw(self, r: int, clash: bool = True) -> Tuple[Dim, ...]:
        """A shape of rank ``r``; ``clash``: a static dim may be a size other than the
        skeleton's and a symbol may sit where it does not belong (statically or at run
        time numpy rejects)."""
        rng, dims = self.rng, []
        for k in range(self.rank - r, self.rank):
            weights = [3, 2, 2, 2, 8, 1] if self.symbolic[k] else [4, 4, 3, 3, 3, 1]
            if not clash:
                weights[2] = weights[5] = 0
            kind = rng.choices(self.KINDS, weights)[0]
            dims.append({"one": 1, "match": self.skeleton[k], "other": rng.choice([2, 3, 4, 5]), "anon": None,
                         "sym": f"S{k}", "stray": rng.choice(["N", "M", "K"])}[kind])
        return tuple(dims)


def declared(rng: random.Random, shapes, rank: int) -> Tuple[Dim, ...]:
    """A result's declared shape: all ``?``, or what is known at compile time (a static
    size > 1, a 1 where all are 1, the one symbol there)."""
    if rng.random() < 0.5:
        return (None,) * rank
    out = []
    for k in range(rank):
        here = [s[k - (rank - len(s))] for s in shapes if k - (rank - len(s)) >= 0]
        big = {d for d in here if isinstance(d, int) and d != 1}
        dyn = {d for d in here if not isinstance(d, int)}
        if big:
            out.append(max(big))
        elif not dyn:
            out.append(1)
        elif len(dyn) == 1 and None not in dyn:
            out.append(next(iter(dyn)))
        else:
            out.append(None)
    return tuple(out)


def gen_single(index: int) -> Net:
    """One node; sometimes an operand is a constant (static shapes only) or the same
    input as another operand."""
    rng = random.Random(SEED * 1000 + index)
    data = np.random.default_rng(index)
    op, n = rng.choice(OPS)
    rank = rng.randint(0, 5)
    sh = Shapes(rng, rank)
    full = rng.randrange(n)  # one operand has the result's rank
    shapes = [sh.draw(rank if i == full else rng.randint(0, rank)) for i in range(n)]
    # opsets before and after Unsqueeze's axes became an input (13); Where needs 9, and
    # 8 is raised to 9 for xla's Where and Expand
    net = Net(index, sh.skeleton, rng.choice([9, 11, 13, 17] if op == "Where" else [8, 9, 11, 13, 17]))
    names = []
    for i, s in enumerate(shapes):
        name, t = f"x{i}", (B if op == "Where" and i == 0 else F)
        values = [j for j in range(i) if op != "Where" or j > 0]
        if values and rng.random() < 0.2:
            j = rng.choice(values)  # the same input again
            names.append(names[j])
            shapes[i] = shapes[j]
            continue
        if all(isinstance(d, int) for d in s) and rng.random() < 0.25:
            net.consts[name] = np.asarray(data.random(s) < 0.5) if t == B else np.asarray(data.standard_normal(s),
                                                                                           np.float32)
        else:
            net.inputs[name] = (t, s)
        names.append(name)
    net.nodes.append((op, names, "y"))
    net.outputs["y"] = declared(rng, shapes, max(len(s) for s in shapes))
    return net


def gen_graph(index: int) -> Net:
    """2 to 5 nodes whose operands are graph inputs, constants and earlier results; the
    static dims all agree with the skeleton (the graph is legal), dynamic ones may not
    at run time. Some intermediate results are graph outputs too."""
    rng = random.Random(SEED * 7919 + index)
    data = np.random.default_rng(10_000 + index)
    rank = rng.randint(0, 4)
    sh = Shapes(rng, rank)
    net = Net(CASES + index, sh.skeleton, rng.choice([9, 13, 17]))
    floats: List[str] = []
    for i in range(rng.randint(2, 4)):
        s = sh.draw(rng.randint(0, rank), clash=False)
        if i and all(isinstance(d, int) for d in s) and rng.random() < 0.3:
            net.consts[f"c{i}"] = np.asarray(data.standard_normal(s), np.float32)
            floats.append(f"c{i}")
        else:
            net.inputs[f"in{i}"] = (F, s)
            floats.append(f"in{i}")
    ranks = {n: len(net.shape(n)) for n in floats}
    used = Counter()
    for k in range(rng.randint(2, 5)):
        op, n = rng.choice(OPS)
        pool = floats[-3:] if k and rng.random() < 0.7 else floats  # mostly recent results
        xs = [rng.choice(pool) for _ in range(n - 1 if op == "Where" else n)]
        if op == "Where":
            cond = f"cond{k}"
            net.inputs[cond] = (B, sh.draw(rng.randint(0, rank), clash=False))
            ranks[cond] = len(net.inputs[cond][1])
            xs = [cond] + xs
        out = f"t{k}"
        net.nodes.append((op, xs, out))
        used.update(xs)
        ranks[out] = max(ranks[x] for x in xs)
        floats.append(out)
    results = [o for _, _, o in net.nodes]
    for o in results:
        if not used[o] or rng.random() < 0.3:
            net.outputs[o] = (None,) * ranks[o]
    return net


SINGLE = [gen_single(i) for i in range(CASES)]
MULTI = [gen_graph(i) for i in range(GRAPHS)]
ALL = SINGLE + MULTI


def test_cases_cover_the_space():
    """The generators reach what the property is about."""
    assert {op for m in SINGLE for op, _, _ in m.nodes} == {"Add", "Mul", "Sub", "Where", "Sum", "Max"}
    assert {len(xs) for m in SINGLE for op, xs, _ in m.nodes if op == "Sum"} == {1, 2, 3}
    assert {m.opset for m in SINGLE} == {8, 9, 11, 13, 17}
    shapes = [m.shape(x) for m in SINGLE for x in m.nodes[0][1]]
    assert {len(s) for s in shapes} == set(range(6))
    dims = [d for s in shapes for d in s]
    assert 1 in dims and None in dims and any(isinstance(d, str) for d in dims)
    assert any(isinstance(d, int) and d > 1 for d in dims)
    rejected = sum(m.statically_rejected() for m in SINGLE)
    assert 0.05 * CASES < rejected < 0.5 * CASES
    assert not any(m.statically_rejected() for m in MULTI)
    # symbols shared between operands or dims, and symbols placed where they clash
    shared = [m for m in SINGLE if any(c > 1 for c in Counter(
        d for n in m.inputs for d in m.shape(n) if isinstance(d, str)).values())]
    assert len(shared) > 0.1 * CASES
    assert sum(any(d in ("N", "M", "K") for s in shapes for d in s) for m in SINGLE) > 0.1 * CASES
    assert sum(bool(m.consts) for m in SINGLE) > 20 and sum(bool(m.consts) for m in MULTI) > 5
    assert sum(len(set(m.nodes[0][1])) < len(m.nodes[0][1]) for m in SINGLE) > 10
    assert sum(len(m.nodes) for m in MULTI) > 3 * GRAPHS


def legalize_net(net: Net, model: onnx.ModelProto, target: str, strict: bool):
    m = import_model(model)
    bad = legalizer.verify(m.graph, "mlir", assume_dynamic_not_one=strict).violations
    assert bad == [], f"{net}: {[str(d) for d in bad]}"
    done = legalizer.legalize(m, target, assume_dynamic_not_one=strict).legalized
    bad = legalizer.verify(m.graph, target).violations
    assert bad == [], f"{net} -> {target}: {[str(d) for d in bad]}"
    out = legalizer.to_onnx(m)
    onnx.checker.check_model(out, full_check=True)
    # every graph input and output keeps its name, dtype and shape (also when xla
    # raises an opset-8 model to 9 with onnx's version converter)
    assert list(out.graph.input) == list(model.graph.input), net
    assert list(out.graph.output) == list(model.graph.output), net
    return out, done.stats


def raises(sess, feeds) -> Optional[str]:
    try:
        sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime's error classes are not public
        assert "onnxruntime" in type(e).__module__, repr(e)
        return str(e)
    return None


def check_bindings(net: Net, ref, out, target: str, strict: bool, counts: Counter):
    rng = random.Random(net.index * 7 + strict)
    data = np.random.default_rng(net.index)
    out, nodes = probe(out, NUMPY)
    assert nodes, net
    new = session(out, CPU)
    names = [o.name for o in new.get_outputs()]
    seen = set()
    for _ in range(BINDINGS):
        binding = net.draw_binding(rng, strict)
        key = tuple(sorted(binding.items()))
        if key in seen:
            continue
        seen.add(key)
        feeds = net.feeds(binding, data)
        where = f"{net} with {binding} ({target}{', strict' if strict else ''})"
        try:
            expected = net.evaluate(feeds)
        except ValueError:
            assert raises(ref, feeds) is not None, f"the original computes for {where}"
            assert raises(new, feeds) is not None, f"the legalized model computes for {where}, which numpy rejects"
            counts["rejected"] += 1
            continue
        results = new.run(None, feeds)
        check_legal_at_run_time(target, nodes, names, results, where)
        for name, got in zip(names, results):
            if name in net.outputs:
                want = expected[name]
                assert got.shape == want.shape and got.dtype == want.dtype, f"{where}: {name} {got.shape} {got.dtype}"
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)
        counts["compared"] += 1


def check_static_rejection(net: Net, model: onnx.ModelProto, tmp_path):
    bad = legalizer.verify(import_model(model).graph, "mlir").violations
    assert bad and bad[0].code == "incompatible-operands", net
    path = tmp_path / f"model{net.index}.onnx"
    onnx.save(model, str(path))
    for target in ("tosa", "xla"):
        res = run(path, RunOptions(target=target, check=False))
        assert res.exit_code == EXIT_VIOLATIONS, net
        assert res.output_verification is None and res.report.output is None, net
        assert res.report.violations and res.report.violations[0]["code"] == "incompatible-operands", net
        assert [n.op for n in res.model.graph.ops()] == [op for op, _, _ in net.nodes], net
    assert not list(tmp_path.glob(f"model{net.index}.legal*")), net


@pytest.mark.parametrize("chunk", sample(range(CHUNKS), [0]))  # each chunk takes every path
def test_property(chunk, tmp_path):
    counts = Counter()
    for net in ALL[chunk::CHUNKS]:
        model = net.model()
        if net.statically_rejected():
            check_static_rejection(net, model, tmp_path)
            counts["static"] += 1
            continue
        ref = session(model, CPU)
        for target in ("tosa", "xla"):
            checks = {}
            for strict in (False, True):
                out, stats = legalize_net(net, model, target, strict)
                checks[strict] = (stats["runtime_broadcast_checks"], stats["runtime_broadcast_checks_elided"])
                check_bindings(net, ref, out, target, strict, counts)
            if target == "tosa":
                assert checks == {False: (0, 0), True: (0, 0)}, net
            else:
                # strict symbolic mode emits no runtime check and elides each the default emits
                assert checks[True] == (0, checks[False][0]) and checks[False][1] == 0, (str(net), checks)
            counts[target, "checks"] += checks[False][0]
    # every chunk exercises each path
    assert counts["compared"] > 50 and counts["rejected"] > 10 and counts["static"] >= 2, counts
    assert counts["xla", "checks"] > 0, counts
