"""Bad input and bad usage: ``legalize MODEL --verify-only`` run as a subprocess must
exit 2 with exactly one ``legalize: error:`` line on stderr, no traceback, nothing on
stdout, no file written, and the input file byte-identical afterwards.

Each case gets a folder of its own; all cases run once, in parallel, in a module
fixture, and each test checks one case's result. At the end, an in-process sweep over
truncations and byte mutations of real models holds every outcome to the contract."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import cli_process, make_model, vi
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
MLP = MODELS / "mlp_bias.onnx"
F = TensorProto.FLOAT


def _bytes(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


def _relu(x="x", y="y", name="n0", **kw):
    return helper.make_node("Relu", [x], [y], name=name, **kw)


def cycle() -> bytes:
    return _bytes(make_model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                              helper.make_node("Add", ["a", "x"], ["b"], name="n2")],
                             [vi("x", F, [2])], [vi("b", F, [2])]))


def dangling() -> bytes:
    return _bytes(make_model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="n1")],
                             [vi("x", F, [2])], [vi("y", F, [2])]))


def duplicate_output() -> bytes:
    return _bytes(make_model([_relu(name="n1"), _relu(name="n2")], [vi("x", F, [2])], [vi("y", F, [2])]))


def output_redefines_input() -> bytes:
    return _bytes(make_model([_relu(y="x")], [vi("x", F, [2])], [vi("x", F, [2])]))


def unknown_onnx_op() -> bytes:
    return _bytes(make_model([helper.make_node("Frobnicate", ["x"], ["y"], name="n0")],
                             [vi("x", F, [2])], [vi("y", F, [2])]))


def domain_not_imported() -> bytes:
    return _bytes(make_model([helper.make_node("Frobnicate", ["x"], ["y"], name="n0", domain="com.example")],
                             [vi("x", F, [2])], [vi("y", F, [2])]))


def no_opset_import() -> bytes:
    m = make_model([_relu()], [vi("x", F, [2])], [vi("y", F, [2])])
    del m.opset_import[:]
    return _bytes(m)


def unnamed_graph_output() -> bytes:
    return _bytes(make_model([_relu()], [vi("x", F, [2])], [vi("", F, [2])]))


def no_graph() -> bytes:
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.add(domain="", version=17)
    return _bytes(m)


def invalid_utf8_op_type() -> bytes:
    # proto2 accepts any bytes in a string field; Python then sees bytes, not str.
    data = _bytes(make_model([_relu()], [vi("x", F, [2])], [vi("y", F, [2])]))
    assert data.count(b"Relu") == 1
    return data.replace(b"Relu", b"R\xbalu")


def control_chars_in_name() -> bytes:
    # A dangling name with a newline in it: the error must still be one line.
    return _bytes(make_model([helper.make_node("Add", ["x", "bad\nname"], ["y"], name="n1")],
                             [vi("x", F, [2])], [vi("y", F, [2])]))


def truncated(fraction: float) -> Callable[[], bytes]:
    def make() -> bytes:
        data = MLP.read_bytes()
        return data[:int(len(data) * fraction)] if fraction < 1 else data[:-1]
    return make


def random_bytes(seed: int, n: int = 4096) -> Callable[[], bytes]:
    return lambda: np.random.default_rng(seed).bytes(n)


def pt2_archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model/archive_format", "pt2")
        z.writestr("model/archive_version", "0")
        z.writestr("model/models/model.json", "{}")
    return buf.getvalue()


def torch_checkpoint() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("model/version", "3\n")
    return buf.getvalue()


def plain_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("readme.txt", "hello")
    return buf.getvalue()


TFLITE = b"\x1c\x00\x00\x00TFL3" + bytes(200)
MLIR_TEXT = (b"module {\n  func.func @main(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {\n"
             b"    return %a : tensor<3x4xf32>\n  }\n}\n")
MLIR_BYTECODE = b"ML\xefR\x00\x05" + bytes(100)
MLIR_NEEDS = ("mlir",)  # MLIR's parser


def mlir_const(ty: str, literal: str) -> bytes:
    """A module whose @main returns one tosa.const of type ``tensor<ty>``."""
    t = f"tensor<{ty}>"
    return (f'func.func @main() -> {t} {{\n  %0 = "tosa.const"() <{{values = dense<{literal}> : {t}}}> : () -> {t}\n'
            f"  return %0 : {t}\n}}\n").encode()


def mlir_abs(attrs: str = "", name: str = "tosa.abs", module_attrs: str = "") -> bytes:
    """A module of one op (generic form) with ``attrs``."""
    head = f"module attributes {{{module_attrs}}} {{\n" if module_attrs else "module {\n"
    return (head + "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
            f'  %0 = "{name}"(%a) {attrs} : (tensor<2xf32>) -> tensor<2xf32>\n'
            "  return %0 : tensor<2xf32>\n}\n}\n").encode()


HUGE = 1 << 62
NPY = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }" + b" " * 50 + b"\n"


@dataclass
class Case:
    file: str = "model.onnx"  # the input's name in the case folder; None: no input file
    content: object = None  # bytes, or a function returning bytes
    args: tuple = ()  # after MODEL --verify-only; "{dir}" is the case folder, "{input}" the input
    expect: str = ""  # a substring of the error line
    setup: Callable[[Path], None] = None
    needs: tuple = ()  # the extras whose error it is (without them: the missing extra's)


CASES: Dict[str, Case] = {
    "missing path": Case(file=None, args=("{dir}/nowhere.onnx",), expect="no such file"),
    "directory": Case(file=None, setup=lambda d: (d / "m.onnx").mkdir(), args=("{dir}/m.onnx",),
                      expect="is a directory"),
    "saved model directory": Case(file=None, setup=lambda d: ((d / "sm").mkdir(), (d / "sm" / "saved_model.pb")
                                                              .write_bytes(b"x")), args=("{dir}/sm",),
                                  expect="SavedModel"),
    "empty file": Case(content=b"", expect="is empty"),
    "text renamed .onnx": Case(content=b"this is not a model\njust some text\n", expect="text file"),
    "text with .txt": Case(file="notes.txt", content=b"hello\n", expect="text file"),
    "cycle": Case(content=cycle, expect="cycle"),
    "dangling value": Case(content=dangling, expect="'nowhere', which no node, input or initializer defines"),
    "duplicate definition": Case(content=duplicate_output, expect="'y' is defined twice"),
    "output redefines an input": Case(content=output_redefines_input, expect="'x' is defined twice"),
    "unknown op in the ONNX domain": Case(content=unknown_onnx_op, expect="unknown op 'Frobnicate'"),
    "custom domain not imported": Case(content=domain_not_imported, expect="does not import"),
    "no opset_import": Case(content=no_opset_import, expect="imports no opset"),
    "unnamed graph output": Case(content=unnamed_graph_output, expect="graph output has no name"),
    "no graph": Case(content=no_graph, expect="not an ONNX model"),
    "invalid UTF-8 in op_type": Case(content=invalid_utf8_op_type, expect="not valid UTF-8"),
    "newline in a value name": Case(content=control_chars_in_name, expect="bad\\nname"),
    "tflite": Case(file="m.tflite", content=TFLITE, expect="TFLite"),
    "tflite renamed .onnx": Case(content=TFLITE, expect="TFLite"),
    "tflite with a wrong identifier": Case(file="m.tflite", content=TFLITE.replace(b"TFL3", b"XXXX"),
                                           expect="not a TFLite flatbuffer (file identifier 'XXXX' at bytes 4..8,"
                                                  " expected 'TFL3')"),
    "flatbuffer with a wrong identifier": Case(file="model", content=TFLITE.replace(b"TFL3", b"TFL2"),
                                               expect="file identifier 'TFL2' at bytes 4..8, expected 'TFL3'"),
    "mlir text cut short": Case(file="m.mlir", content=MLIR_TEXT[:60], expect="m.mlir:2:", needs=MLIR_NEEDS),
    # issue 24: MLIR inputs that once ended in "internal error"
    "mlir dense constant of 2^62x2^62": Case(
        file="m.mlir", content=mlir_const(f"{HUGE}x{HUGE}xf32", '"0x0000803F"'), needs=MLIR_NEEDS,
        expect=f"m.mlir:2:8: a constant of type 'tensor<{HUGE}x{HUGE}xf32>' would be"
               " 85,070,591,730,234,615,865,843,651,857,942,052,864 bytes, more than an array can address;"
               " legalize reads no such constant"),
    "mlir splat of 2^62 elements": Case(
        file="m.mlir", content=mlir_const(f"{HUGE}xf32", "1.0"), needs=MLIR_NEEDS,
        expect=f"m.mlir:2:8: a constant of type 'tensor<{HUGE}xf32>' would be 18,446,744,073,709,551,616 bytes,"
               " more than an array can address; legalize reads no such constant"),
    "mlir undotted attribute name": Case(
        file="m.mlir", content=mlir_abs(module_attrs="foo = 1 : i32"), needs=MLIR_NEEDS,
        expect="m.mlir:1:1: 'builtin.module' op can only contain attributes with dialect-prefixed names,"
               " found: 'foo'"),
    # names MLIR takes as any bytes, which its bindings cannot give as text
    "mlir op name not UTF-8": Case(file="m.mlir", content=mlir_abs(name="x.\\FF"), needs=MLIR_NEEDS,
                                   expect='m.mlir:3:8: a name that is not UTF-8 text ("x.\\FF"); legalize reads'
                                          " no such name"),
    "mlir attribute name not UTF-8": Case(file="m.mlir", content=mlir_abs('{"x.\\FF" = 1 : i32}'), needs=MLIR_NEEDS,
                                          expect="m.mlir:3:8: an attribute name that is not UTF-8 text; legalize"
                                                 " reads no such name"),
    "mlir bytecode": Case(file="m.mlirbc", content=MLIR_BYTECODE, expect="MLIR bytecode"),
    "torch.export archive": Case(file="m.pt2", content=pt2_archive, expect="torch.export"),
    "torch.save checkpoint": Case(file="m.pt", content=torch_checkpoint, expect="checkpoint"),
    "plain zip": Case(file="m.zip", content=plain_zip, expect="zip archive"),
    "numpy array": Case(file="m.npy", content=NPY, expect="NumPy"),
    "bogus profile": Case(content=MLP.read_bytes, args=("--profile", "bogus"), expect="--profile"),
    "unknown option": Case(content=MLP.read_bytes, args=("--frobnicate",), expect="--frobnicate"),
    "an output with --verify-only": Case(content=MLP.read_bytes, args=("{dir}/out.onnx",), expect="writes no model"),
    "-o with --verify-only": Case(content=MLP.read_bytes, args=("-o", "{dir}/out.onnx"), expect="writes no model"),
    "quiet and verbose": Case(content=MLP.read_bytes, args=("-q", "-v"), expect="-q and -v"),
    "report in a missing folder": Case(content=MLP.read_bytes, args=("--report", "{dir}/no/such/r.json"),
                                       expect="does not exist"),
    "report onto a folder": Case(content=MLP.read_bytes, setup=lambda d: (d / "r").mkdir(),
                                 args=("--report", "{dir}/r"), expect="is a directory"),
    "report under a file": Case(content=MLP.read_bytes, args=("--report", "{input}/r.json"),
                                expect="not a directory"),
    "report onto the input": Case(content=MLP.read_bytes, args=("--report", "{input}"),
                                  expect="refusing to overwrite the input"),
    "report onto the input, --json": Case(content=MLP.read_bytes, args=("--report", "{input}", "--json"),
                                          expect="refusing to overwrite the input"),
}
for _f in (0.1, 0.5, 0.9, 1.0):
    CASES[f"truncated at {_f:.0%}" if _f < 1 else "truncated by one byte"] = Case(content=truncated(_f),
                                                                                  expect="not a valid ONNX model")
for _s in range(4):
    CASES[f"random bytes, seed {_s}"] = Case(content=random_bytes(_s))
for _s, _name in [(10, "weights.bin"), (11, "data.txt"), (12, "noextension")]:
    CASES[f"random bytes as {_name}"] = Case(file=_name, content=random_bytes(_s))


def _tree(d: Path) -> Dict[str, str]:
    """Every file under ``d`` with its content hash (directories as 'dir')."""
    out = {}
    for p in sorted(d.rglob("*")):
        out[str(p.relative_to(d))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _run(case: Case, d: Path) -> dict:
    d.mkdir(parents=True)
    if case.setup is not None:
        case.setup(d)
    input_path = None
    if case.file is not None:
        input_path = d / case.file
        data = case.content() if callable(case.content) else case.content
        input_path.write_bytes(data)
    args = [a.format(dir=d, input=input_path) for a in case.args]
    model = [str(input_path)] if input_path is not None else args[:1]
    rest = args if input_path is not None else args[1:]
    before = _tree(d)
    p = cli_process(*model, "--verify-only", *rest)
    return {"proc": p, "before": before, "after": _tree(d)}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad_input")
    with ThreadPoolExecutor(max_workers=max(2, min(8, (os.cpu_count() or 2) * 2))) as ex:
        futures = {name: ex.submit(_run, case, base / f"case{i}") for i, (name, case) in enumerate(CASES.items())}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(results, name):
    require(*CASES[name].needs)
    r = results[name]
    p = r["proc"]
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = p.stderr.splitlines()
    assert len(err) == 1, p.stderr
    assert err[0].startswith("legalize: error: "), err[0]
    assert CASES[name].expect in err[0]
    if "--json" in CASES[name].args:  # with --json, the error is a JSON object on stdout too
        assert json.loads(p.stdout)["error"] == err[0][len("legalize: error: "):]
    else:
        assert p.stdout == ""
    assert r["after"] == r["before"]  # no file written, none changed or removed


# -- an in-process sweep: every outcome keeps the contract -----------------------------

def _assert_contract(code, out: str, err: str, what: str) -> None:
    err_lines = err.splitlines()
    if code == 2:
        assert len(err_lines) == 1 and err_lines[0].startswith("legalize: error: "), (what, err)
        assert out == "", what
    else:
        assert code in (0, 1), (what, code, err)
        assert err == "", (what, err)  # -q: no warnings either
        assert out.splitlines()[-1].endswith("under 'mlir'"), what


def _sources(tmp_path) -> List[bytes]:
    from test_cli import custom_domain_model

    return [MLP.read_bytes(), (MODELS / "dynamic_broadcast.onnx").read_bytes(),
            (MODELS / "incompatible_add.onnx").read_bytes(), custom_domain_model([2, 3]).SerializeToString()]


# The sweeps below: a sample (every fifth cut, the first 30 seeds) in the default run,
# the rest under -m slow.
SWEEP = [pytest.param(True, id="sample"), pytest.param(False, id="rest", marks=pytest.mark.slow)]


@pytest.mark.parametrize("in_sample", SWEEP)
def test_every_truncation(tmp_path, in_sample, legalize_in_process):
    path = tmp_path / "t.onnx"
    for src in _sources(tmp_path):
        step = max(1, len(src) // 150)
        cuts = list(range(1, len(src), step)) + [len(src) - 1]
        for i, n in enumerate(cuts):
            if (i % 5 == 0 or i == len(cuts) - 1) != in_sample:
                continue
            path.write_bytes(src[:n])
            code, out, err = legalize_in_process(path, "--verify-only", "-q")
            _assert_contract(code, out, err, f"truncated at {n}/{len(src)}")
            assert "internal error" not in err


@pytest.mark.parametrize("in_sample", SWEEP)
def test_byte_mutations(tmp_path, in_sample, legalize_in_process):
    path = tmp_path / "m.onnx"
    for k, src in enumerate(_sources(tmp_path)):
        for seed in range(30) if in_sample else range(30, 150):
            rng = np.random.default_rng(1000 * k + seed)
            data = bytearray(src)
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
            path.write_bytes(bytes(data))
            code, out, err = legalize_in_process(path, "--verify-only", "-q")
            _assert_contract(code, out, err, f"source {k}, seed {seed}")
            assert "internal error" not in err, (k, seed, err)
