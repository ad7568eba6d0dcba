"""An untrusted ``.pt2`` runs nothing (issue 14, item 7).

Each hostile archive is a real sample (``models/mlp.pt2``) with one part replaced by a
payload that creates a marker file when torch's loader runs it: a pickle (sample
inputs, a pickled weight, an opaque constant), a shape expression (``sympy.sympify``
is ``eval``), an input guard (compiled and run), a pytree context that makes the
loader import a module. Without ``--trust-pt2`` each is refused with one line and
exit 2, the marker is not there and nothing is written; with it, torch's loader runs
as it is, and the marker shows the payload was real (in a subprocess; the marker is a
file in tmp_path)."""

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from needs import require

import legalizer
from legalizer.errors import BadInput

require("torch", module=True)
import torch  # noqa: E402

from legalizer.kinds.pt2 import safety as pt2_safety  # noqa: E402 - needs torch

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "models" / "mlp.pt2"
HINT = "pass --trust-pt2 only for a file you trust"
SYMBOL = "Symbol('s77', positive=True, integer=True)"  # mlp.pt2's batch dim
MARKER = "MARKER"


# How the command runs here: a bare environment (this checkout on PYTHONPATH, 120
# columns), ``python -c`` calling ``main``, time for torch to import.
BARE = {"isolated": True, "prelude": "", "timeout": 600}


def _on_path(folder: Path) -> dict:
    """``folder`` on PYTHONPATH after this checkout (where a hostile archive's modules lie)."""
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}


def _rewrite(dst: Path, replace=None, add=None) -> Path:
    """The sample archive with members replaced (name -> function of the old bytes) or
    added, under the archive's own root folder, as torch.export.save lays it out."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(SAMPLE) as zin, zipfile.ZipFile(dst, "w") as zout:
        root = zin.namelist()[0].split("/", 1)[0] + "/"
        for info in zin.infolist():
            name = info.filename[len(root):]
            data = zin.read(info.filename)
            zout.writestr(info.filename, replace[name](data) if name in replace else data)
        for name, data in add.items():
            zout.writestr(root + name, data)
    return dst


def _creates(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()"


class _RunsCode:
    """Unpickled, creates ``marker``: what a hostile pickle does instead."""

    def __init__(self, marker: Path):
        self.code = _creates(marker)

    def __reduce__(self):
        return exec, (self.code,)


def _torch_saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _edit_json(edit):
    def apply(data: bytes) -> bytes:
        doc = json.loads(data)
        edit(doc)
        return json.dumps(doc).encode()

    return apply


# -- the hostile archives: kind -> (builder, the refusal's reason) --------------------

def _sample_inputs(dst, marker, _mods):
    # torch unpickles the sample inputs safely, then (failing) with weights_only=False
    return _rewrite(dst, {"data/sample_inputs/model.pt": lambda _: _torch_saved(((_RunsCode(marker),), {}))})


def _pickled_weight(dst, marker, _mods):
    # a weight marked use_pickle: torch.load(weights_only=False) straight away
    def mark(config):
        config["config"]["bias"].update(use_pickle=True)

    return _rewrite(dst, {"data/weights/model_weights_config.json": _edit_json(mark),
                          "data/weights/weight_0": lambda _: _torch_saved(_RunsCode(marker))})


def _opaque_constant(dst, marker, _mods):
    # an "opaque object" constant: pickle.loads
    config = {"config": {"c": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                               "tensor_meta": None}}}
    return _rewrite(dst, {"data/constants/model_constants_config.json": lambda _: json.dumps(config).encode()},
                    add={"data/constants/opaque_obj_0": pickle.dumps(_RunsCode(marker))})


# Python that creates the marker (the CLI runs in tmp_path), short enough to be shown whole
TOUCH = f"__import__('pathlib').Path('{MARKER}').touch()"
EXPRESSION = f"{TOUCH} or {SYMBOL}"
GUARD = f"{TOUCH} is None"


def _shape_expression(dst, _marker, _mods):
    # sympy.sympify(expr_str) evaluates it as Python
    return _rewrite(dst, {"models/model.json": lambda data: data.replace(json.dumps(SYMBOL).encode(),
                                                                          json.dumps(EXPRESSION).encode(), 1)})


def _input_guard(dst, _marker, _mods):
    # program.module() compiles the guards into its input check and runs it
    return _rewrite(dst, {"models/model.json": _edit_json(lambda doc: doc.update(guards_code=[GUARD]))})


def _enum_context(dst, marker, mods):
    # a pytree context holding {"__enum__": ..., "fqn": "module:Class"}: the loader imports the module
    mods.mkdir()
    (mods / "pt2_payload.py").write_text(f"import enum\n{_creates(marker)}\nclass E(enum.Enum):\n    A = 1\n")

    def mark(doc):
        for entry in doc["graph_module"]["module_call_graph"]:
            if entry["signature"] is None:  # a submodule's
                continue
            spec = json.loads(entry["signature"]["in_spec"])
            kwargs = spec[1]["children_spec"][1]  # the program's (empty) kwargs dict
            kwargs["context"] = json.dumps([{"__enum__": True, "fqn": "pt2_payload:E", "name": "A"}])
            kwargs["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
            entry["signature"]["in_spec"] = json.dumps(spec)

    return _rewrite(dst, {"models/model.json": _edit_json(mark)})


UNPICKLING = "needs unsafe unpickling (arbitrary code)"
HOSTILE = {
    "sample_inputs": (_sample_inputs, UNPICKLING),
    "pickled_weight": (_pickled_weight, UNPICKLING),
    "opaque_constant": (_opaque_constant, UNPICKLING),
    "shape_expression": (_shape_expression, f"has Python code where torch expects a shape expression"
                                            f" (models/model.json: \"{EXPRESSION}\"), which loading runs"),
    "input_guard": (_input_guard, f"has Python code where torch expects an input guard (models/model.json:"
                                  f" \"{GUARD}\"), which torch compiles and runs"),
    "enum_context": (_enum_context, "names a module to import (models/model.json: an enum in a pytree context),"
                                    " which loading does"),
}


def _hostile(kind, tmp_path):
    archive, marker, mods = tmp_path / "model.pt2", tmp_path / MARKER, tmp_path / "mods"
    HOSTILE[kind][0](archive, marker, mods)
    return archive, marker, mods


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_pt2_is_refused_and_runs_nothing(tmp_path, kind, legalize):
    archive, marker, mods = _hostile(kind, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    p = legalize(archive, cwd=tmp_path, env=_on_path(mods), **BARE)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0] == f"legalize: error: {archive}: its archive {HOSTILE[kind][1]}; {HINT}"
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temporary left


# What torch does with each payload when trusted: it runs (the marker), then the load
# goes on (exit 0: the program is legal) or fails on what the payload left behind.
TRUSTED_EXIT = {"sample_inputs": 0, "pickled_weight": 2, "opaque_constant": 2, "shape_expression": 0,
                "input_guard": 0, "enum_context": 2}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_trust_pt2_loads_with_torch_as_it_is(tmp_path, kind, legalize):
    """The payloads are real: with --trust-pt2, torch.export.load runs each."""
    archive, marker, mods = _hostile(kind, tmp_path)
    p = legalize(archive, "--verify-only", "--trust-pt2", cwd=tmp_path, env=_on_path(mods), **BARE)
    assert marker.exists(), p.stderr
    assert p.returncode == TRUSTED_EXIT[kind], p.stdout + p.stderr
    assert "Traceback" not in p.stderr


def test_native_code_is_refused(tmp_path, legalize):
    """An AOTInductor package is a shared library the loader opens."""
    archive = _rewrite(tmp_path / "model.pt2", add={"data/aotinductor/model/model.so": b"\x7fELF"})
    p = legalize(archive, cwd=tmp_path, **BARE)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"legalize: error: {archive}: its archive holds compiled native code"
                                     f" (data/aotinductor/model/model.so), which torch's loader opens; {HINT}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt2"]


def test_a_call_that_is_not_a_tensor_op_is_refused(tmp_path, legalize):
    """The check runs the program: a node may call tensor ops, not a function that
    imports a module by name."""
    target = "torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch"
    node = {"target": target, "inputs": [{"name": "", "arg": {"as_string": "os.system"}, "kind": 1}],
            "outputs": [], "metadata": {}, "is_hop_single_tensor_return": None, "name": "call"}
    archive = _rewrite(tmp_path / "model.pt2", {"models/model.json": _edit_json(
        lambda doc: doc["graph_module"]["graph"]["nodes"].insert(0, node))})
    p = legalize(archive, cwd=tmp_path, **BARE)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"legalize: error: {archive}: its archive calls '{target}'"
                                     f" (models/model.json), which is not a tensor op; {HINT}"]


def test_pre_27_format_is_refused(tmp_path, legalize):
    """torch reads the old zip layout with a fallback to unsafe unpickling."""
    archive = tmp_path / "old.pt2"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("old/version", "8.20")
        z.writestr("old/serialized_exported_program.json", "{}")
        z.writestr("old/serialized_example_inputs.pt", pickle.dumps(_RunsCode(tmp_path / "MARKER")))
    p = legalize(archive, cwd=tmp_path, **BARE)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"legalize: error: {archive}: its archive is in the pre-2.7 torch.export format,"
                                     f" which torch loads with unsafe unpickling; {HINT}"]
    assert not (tmp_path / "MARKER").exists()


def test_a_pickled_plain_tensor_needs_no_trust(tmp_path, legalize):
    """A weight stored as a pickle that the safe unpickler reads (a tensor) is not
    refused: only what needs the unsafe path is."""
    with zipfile.ZipFile(SAMPLE) as z:
        root = z.namelist()[0].split("/", 1)[0]
        config = json.loads(z.read(f"{root}/data/weights/model_weights_config.json"))
    n = config["config"]["bias"]["tensor_meta"]["sizes"][0]["as_int"]

    def mark(doc):
        doc["config"]["bias"].update(use_pickle=True)

    weight = torch.nn.Parameter(torch.ones(n))
    archive = _rewrite(tmp_path / "model.pt2", {"data/weights/model_weights_config.json": _edit_json(mark),
                                                "data/weights/weight_0": lambda _: _torch_saved(weight)})
    p = legalize(archive, "--verify-only", cwd=tmp_path, **BARE)
    assert p.returncode == 0, p.stderr
    model = legalizer.load(archive)
    assert torch.equal(model.torch.program.state_dict["bias"], torch.ones(n))


def test_samples_load_without_the_flag_and_with_it(tmp_path):
    model = legalizer.load(SAMPLE)
    trusted = legalizer.load(SAMPLE, trust_pt2=True)
    assert model.torch is not None and trusted.torch is not None
    assert [i.name for i in model.torch.onnx.graph.input] == [i.name for i in trusted.torch.onnx.graph.input]
    assert os.environ.get(pt2_safety.FORCE_SAFE) is None  # the load's setting is gone after it


def test_library_refuses_and_accepts_trust_pt2(tmp_path):
    archive, marker, _ = _hostile("sample_inputs", tmp_path)
    want = f"{archive}: its archive {UNPICKLING}; {HINT}"
    with pytest.raises(BadInput) as e:
        legalizer.load(archive)
    assert str(e.value) == want
    for refused in (legalizer.legalize, legalizer.check):
        with pytest.raises(BadInput) as e:
            refused(archive)
        assert str(e.value) == want
    assert not marker.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt2"]
    assert os.environ.get(pt2_safety.FORCE_SAFE) is None
    benign = tmp_path / "mlp.pt2"
    benign.write_bytes(SAMPLE.read_bytes())
    out = legalizer.legalize(benign, trust_pt2=True, check=False).output
    assert out == tmp_path / "mlp.legal.pt2" and out.exists()


# -- the grammars, on strings torch writes and on strings that are code --------------

@pytest.mark.parametrize("text", [
    SYMBOL, "Mul(Integer(8), Symbol('s0', positive=True, integer=True), Symbol('s53', positive=True, integer=True))",
    "Add(Symbol('u0', integer=True), Integer(-1))", "FloorDiv(Symbol('s0', integer=True), Integer(2))",
    "Float('1.5', precision=53)", "Rational(1, 2)", "StrictLessThan(Symbol('s0'), Integer(5))", "int_oo", "-oo",
    "OpaqueUnaryFn_cos(Symbol('s0'))", "s0*2 + 1", "Max(Integer(2), Symbol('s0', positive=True, integer=True))",
])
def test_plain_shape_expressions_pass(text):
    assert pt2_safety.sympy_risk(text, "m") is None


@pytest.mark.parametrize("text", [
    "__import__('os').system('x')", "Symbol('s0').__class__", "Poly('x')", "Symbol('a; b')", "Integer(open)",
    "Symbol(*'x')", "eval('1')", "Function('f')(1)", "[x for x in ()]", "lambda: 0", "Symbol('s0')[0]",
    "Integer(1) if 1 else 0", "Symbol('x', **{})", "sympify('1')",
])
def test_code_in_a_shape_expression_is_refused(text):
    assert pt2_safety.sympy_risk(text, "m") is not None


@pytest.mark.parametrize("text", [
    "L['x'].size()[1] == L['mask'].size()[1]", "2 <= L['x'].size()[0]", "L['x'].size()[0] % 2 == 0",
    "math.floor(L['x'].size()[0] / 2) == 3", "max(L['x'].size()[0], 1) <= math.inf",
    "torch.sym_float(L['x'].size()[0]) > 0.5", "L['xs'][1].stride()[0] == 1",
])
def test_plain_guards_pass(text):
    assert pt2_safety.guard_risk(text, "m") is None


@pytest.mark.parametrize("text", [
    "exec('x') is None", "L['x'].__class__", "L['x'].size().__class__", "torch.load('f')", "math.__loader__",
    "L['x'] == 1\n__import__('os')", "L['a\\'b'].size()[0] == 1", "getattr(L, 'x')", "L", "open('f')",
])
def test_code_in_a_guard_is_refused(text):
    assert pt2_safety.guard_risk(text, "m") is not None


@pytest.mark.parametrize("target, ok", [
    ("torch.ops.aten.linear.default", True), ("torch.ops.higher_order.cond", True), ("_operator.getitem", True),
    ("torch.sym_max", True), ("torch.ops.quantized_decomposed.quantize_per_tensor.default", True),
    ("torch.ops.aten.from_file.default", False), ("torch.os.system", False), ("_operator.attrgetter", False),
    ("torch.ops.aten.linear.default.__call__", False), ("torch.ops.higher_order.triton_kernel_wrapper_mutation", False),
    ("torch.ops.mylib.op.default", False), ("builtins.exec", False),
])
def test_graph_targets(target, ok):
    assert (pt2_safety.target_risk(target, "m") is None) == ok


# -- bombs: arithmetic that loading evaluates, members that inflate (issue 24, item 5) --

@pytest.mark.parametrize("text", [
    "9**9**9**9", "10**10**10", "Pow(Integer(9), Pow(Integer(9), Integer(99)))", "factorial(Integer(1000000000))",
    "Mul(Integer(99999999999999999999999), Symbol('s0'))", "binomial(Integer(10**9), Integer(5*10**8))",
    "gamma(Integer(1000000000))", "PowByNatural(Integer(9), Integer(999999999))", "2**(3*4*5*6)",
    "((((((2**64)**64)**64)**64)**64)**64)", "Pow(Pow(Pow(Integer(2), Integer(64)), Integer(64)), Integer(64))",
])
def test_explosive_shape_expressions_are_refused(text):
    reason = pt2_safety.sympy_risk(text, "m")
    assert reason is not None and "that may not end" in reason and reason.endswith("which loading evaluates")


@pytest.mark.parametrize("text", [
    "math.factorial(10**9) > 0", "L['x'].size()[0] == 10**10**10", "math.comb(10**9, 10**8) == 1",
    "math.pow(9, 9**9) > 0", "L['x'].size()[0] < 123456789012345678901234567890",
    "L['x'].size()[0] == ((2**64)**64)**64",
])
def test_explosive_guards_are_refused(text):
    reason = pt2_safety.guard_risk(text, "m")
    assert reason is not None and "that may not end" in reason and reason.endswith("which torch runs")


@pytest.mark.parametrize("text", ["s0**2", "2**s0", "Pow(Symbol('s0'), Integer(-1))", "s0**(s1 + 1)", "2**63 - 1",
                                  "(2**64)**64"])
def test_bounded_powers_pass(text):
    assert pt2_safety.sympy_risk(text, "m") is None


def test_inflating_member_is_refused_before_it_is_read(tmp_path, legalize):
    """A weight member deflated from 4 MiB... that inflates to 256 MiB: refused from the
    zip directory's sizes, with no memory spent on it."""
    archive = tmp_path / "model.pt2"
    with zipfile.ZipFile(SAMPLE) as zin, zipfile.ZipFile(archive, "w") as zout:
        for info in zin.infolist():
            if info.filename.endswith("data/weights/weight_1"):
                zout.writestr(info.filename, bytes(256 << 20), compress_type=zipfile.ZIP_DEFLATED)
            else:
                zout.writestr(info, zin.read(info.filename))
    assert archive.stat().st_size < 1 << 20
    p = legalize(archive, cwd=tmp_path, **BARE)
    assert p.returncode == 2, p.stdout + p.stderr
    member = next(n for n in zipfile.ZipFile(archive).namelist() if n.endswith("weight_1"))
    size = zipfile.ZipFile(archive).getinfo(member).compress_size
    assert p.stderr.splitlines() == [
        f"legalize: error: {archive}: its archive member {member!r} inflates from {size:,} to {256 << 20:,}"
        f" bytes (more than 100x), which reading it would allocate; {HINT}"]
