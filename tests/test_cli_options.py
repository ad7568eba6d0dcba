"""Every option with odd values and in combinations no run can honour, on each input
format of models/ and in batches: one ``legalize: error:`` line, exit 2, nothing written
(issue 22, "Nothing silently unchecked"); and what the options bind when they are right:
a ``--dim`` binds a dim of the model (of some model, in a batch), no binding has a
size-0 dim, and a binding that compares no element is never reported as passed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

# The models each case may name, copied into the case's own folder.
SOURCES = {"mlp_bias.onnx": MODELS / "mlp_bias.onnx", "dyn.onnx": MODELS / "dynamic_broadcast.onnx",
           "static.onnx": MODELS / "incompatible_add.onnx", "dyn.tflite": MODELS / "tflite/dynamic_broadcast.tflite",
           "add.tflite": MODELS / "tflite/broadcast_add.tflite",
           "add.mlirbc": MODELS / "tosa_converter/broadcast_add.mlirbc",
           "dyn.mlirbc": MODELS / "tosa_converter/dynamic_broadcast.mlirbc", "mlp.pt2": MODELS / "mlp.pt2"}
DYN_ONNX_DIMS = "a[1], b[0], b[1], c[0], d[1], N, M"  # symbols, and input[axis] for the anonymous ones
DYN_TFLITE_DIMS = "x[0], z[0], w[0], w[1]"  # shape_signature -1: input[axis]


def _tree(d: Path) -> Dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/"
            for p in sorted(d.rglob("*"))}


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the models, a plain file, a folder, an empty and a non-empty array;
    the current folder while the case runs (the lines name relative paths)."""
    for name, src in SOURCES.items():
        shutil.copy(src, tmp_path / name)
    (tmp_path / "dir").mkdir()
    (tmp_path / "file.txt").write_text("not a model\n")
    np.save(tmp_path / "empty.npy", np.zeros((0, 16), np.float32))
    np.save(tmp_path / "x.npy", np.ones((2, 16), np.float32))
    np.savez(tmp_path / "empty.npz", x=np.zeros((2, 0), np.float32))
    os.mkfifo(tmp_path / "fifo")  # a read of it would block: never opened
    np.save(tmp_path / "i64.npy", np.ones((2, 16), np.int64))
    np.save(tmp_path / "f64.npy", np.ones((2, 3, 4, 5), np.float64))
    monkeypatch.chdir(tmp_path)
    return tmp_path


VERIFY_ONLY_CHECK = "it cannot go with --verify-only (except with --against)"

# (arguments, the one line on stderr): each exits 2 and writes nothing.
BAD = [
    # --dim: a dim of the model, once, of size 1 or more
    (["dyn.onnx", "--dim", "nope=3"],
     f"--dim nope=3: the model has no dynamic dim 'nope'; its dims are: {DYN_ONNX_DIMS}"),
    (["dyn.onnx", "--dim", "m=3"], f"--dim m=3: the model has no dynamic dim 'm'; its dims are: {DYN_ONNX_DIMS}"),
    (["mlp_bias.onnx", "--dim", "Batch=7"], "--dim Batch=7: the model has no dynamic dim 'Batch'; its dims are: N"),
    (["mlp_bias.onnx", "--dim", "x[0]=2"], "--dim x[0]=2: the model has no dynamic dim 'x[0]'; its dims are: N"),
    (["mlp_bias.onnx", "--dim", "N=2", "--input-shape", "x:2x16", "--dim", "Q=1"],
     "--dim Q=1: the model has no dynamic dim 'Q'; its dims are: N"),
    (["static.onnx", "--dim", "N=2", "--no-check"],
     "--dim N=2: the model has no dynamic dim 'N'; it has none (every input dim is static)"),
    (["dyn.tflite", "--dim", "nope=3"],
     f"--dim nope=3: the model has no dynamic dim 'nope'; its dims are: {DYN_TFLITE_DIMS}"),
    (["add.tflite", "--dim", "x[0]=3"],
     "--dim x[0]=3: the model has no dynamic dim 'x[0]'; it has none (every input dim is static)"),
    (["dyn.onnx", "--dim", "M=3", "--dim", "M=4"], "--dim: dim 'M' is given twice"),
    (["dyn.onnx", "--dim", "M=3", "--dim", "M=3"], "--dim: dim 'M' is given twice"),
    (["dyn.onnx", "--dim", "M=-1"], "--dim expects NAME=SIZE with SIZE a positive integer, not 'M=-1'"),
    (["dyn.onnx", "--dim", "M="], "--dim expects NAME=SIZE with SIZE a positive integer, not 'M='"),
    (["dyn.onnx", "--dim", "=3"], "--dim expects NAME=SIZE with SIZE a positive integer, not '=3'"),
    (["dyn.onnx", "--dim", "M"], "--dim expects NAME=SIZE with SIZE a positive integer, not 'M'"),
    (["dyn.onnx", "--dim", "M=1.5"], "--dim expects NAME=SIZE with SIZE a positive integer, not 'M=1.5'"),
    (["mlp_bias.onnx", "--assume-dynamic-not-one", "--dim", "N=1"],
     "--assume-dynamic-not-one: no dynamic dim is 1 at run time, but the check would bind 'N' to 1"),
    (["mlp_bias.onnx", "--assume-dynamic-not-one", "--input-shape", "x:1x16"],
     "--assume-dynamic-not-one: no dynamic dim is 1 at run time, but the check would bind 'N' to 1"),
    # size 0: empty tensors, a check that would compare nothing
    (["dyn.onnx", "--dim", "M=0"], "--dim M=0: a size of 0 makes empty inputs, and the check would compare no element"),
    (["dyn.tflite", "--dim", "x[0]=0"],
     "--dim x[0]=0: a size of 0 makes empty inputs, and the check would compare no element"),
    (["mlp_bias.onnx", "--input-shape", "x:0x16"],
     "--input-shape x:0x16: dim 0 is 0: an empty input, and the check would compare no element"),
    (["mlp_bias.onnx", "--input", "x=fifo"], "--input x: cannot read 'fifo': not a regular file (a device, a FIFO"
                                            " or a socket)"),
    (["mlp_bias.onnx", "--input", "fifo"], "--input fifo: cannot read it: not a regular file (a device, a FIFO or a"
                                           " socket)"),
    (["mlp_bias.onnx", "--input", "x=dir"], "--input x: cannot read 'dir': is a directory"),
    (["mlp_bias.onnx", "--input", "x=/dev/zero"], "--input x: cannot read '/dev/zero': not a regular file (a device,"
                                                  " a FIFO or a socket)"),
    (["mlp_bias.onnx", "--input", "x=nofile.npy"], "--input x: cannot read 'nofile.npy' as a .npy array: [Errno 2]"
                                                   " No such file or directory: 'nofile.npy'"),
    (["mlp_bias.onnx", "--input", "x=mlp_bias.onnx"], "--input x: cannot read 'mlp_bias.onnx': not a .npy array (nor"
                                                      " an .npz archive)"),
    (["mlp_bias.onnx", "--input", "x=i64.npy"], "input array 'x' (2x16): dtype int64, but input 'x' is declared float32"),
    (["add.tflite", "--input", "x=f64.npy"], "input array 'x' (2x3x4x5): dtype float64, but input 'x' is declared"
                                             " float32"),
    (["fifo"], "fifo: is not a regular file"),
    (["/dev/zero"], "/dev/zero: is not a regular file"),
    (["mlp_bias.onnx", "--input-shape", "x:-1x16"],
     "--input-shape expects NAME:DIMxDIM... with each DIM a positive integer (e.g. x:1x512), not 'x:-1x16'"),
    # tolerances: finite, non-negative
    (["mlp_bias.onnx", "--rtol", "inf"],
     "--rtol inf: an infinite tolerance accepts any difference; give a finite number"),
    (["mlp_bias.onnx", "--atol", "y:Infinity"],
     "--atol y:Infinity: an infinite tolerance accepts any difference; give a finite number"),
    (["mlp_bias.onnx", "--rtol", "1e-3", "--rtol", "1e-2"], "--rtol: the tolerance of every output is given twice"),
    (["mlp_bias.onnx", "--atol", "y:1e-3", "--atol", "1e-2", "--atol", "y:1e-3"],
     "--atol: the tolerance of output 'y' is given twice"),
    (["mlp_bias.onnx", "--rtol", "nan"], "--rtol expects a non-negative number or OUTPUT:NUMBER, not 'nan'"),
    (["mlp_bias.onnx", "--atol", "-1e-3"], "--atol expects a non-negative number or OUTPUT:NUMBER, not '-1e-3'"),
    (["mlp_bias.onnx", "--rtol", ""], "--rtol expects a non-negative number or OUTPUT:NUMBER, not ''"),
    # options no run would use: --verify-only writes no model and runs no check (unless --against)
    (["mlp_bias.onnx", "--verify-only", "--emit", "tosa"],
     "--emit chooses the formats of the legalized model: it cannot go with --verify-only, which writes none"),
    (["add.mlirbc", "--verify-only", "--emit", "onnx"],
     "--emit chooses the formats of the legalized model: it cannot go with --verify-only, which writes none"),
    (["mlp_bias.onnx", "--verify-only", "--dim", "N=2"],
     f"--dim binds dims for the numeric check: {VERIFY_ONLY_CHECK}"),
    (["dyn.tflite", "--verify-only", "--input-shape", "x:2x3"],
     f"--input-shape binds dims for the numeric check: {VERIFY_ONLY_CHECK}"),
    (["mlp_bias.onnx", "--verify-only", "--input", "x=x.npy"], f"--input feeds the numeric check: {VERIFY_ONLY_CHECK}"),
    (["add.mlirbc", "--verify-only", "--rtol", "1e-3"],
     f"--rtol sets a tolerance of the numeric check: {VERIFY_ONLY_CHECK}"),
    (["mlp_bias.onnx", "--verify-only", "--atol", "1e-3"],
     f"--atol sets a tolerance of the numeric check: {VERIFY_ONLY_CHECK}"),
    (["mlp_bias.onnx", "--verify-only", "--localize"],
     f"--localize compares intermediate values in the numeric check: {VERIFY_ONLY_CHECK}"),
    (["mlp_bias.onnx", "--no-check", "--rtol", "1e-3"],
     "--rtol sets a tolerance of the numeric check: it cannot go with --no-check"),
    (["mlp_bias.onnx", "--no-check", "--input", "x=x.npy"],
     "--input feeds the numeric check: it cannot go with --no-check"),
    (["mlp_bias.onnx", "--no-check", "--localize"],
     "--localize compares intermediate values in the numeric check: it cannot go with --no-check"),
    (["add.mlirbc", "--verify-only", "--no-check", "--against", "add.tflite"],
     "--against compares MODEL with another model: it cannot go with --no-check"),
    (["mlp_bias.onnx", "--require-check", "--no-check"], "--require-check needs a check to require: it cannot go with"
                                                         " --no-check, nor with --verify-only (except with --against)"),
    (["mlp_bias.onnx", "--against", "mlp_bias.onnx"], "--against compares MODEL with another model: add --verify-only"),
    # (MLIR's parser reads the module before its dialect says it is TOSA: NEEDS below)
    (["add.mlirbc"], "add.mlirbc: a TOSA MLIR module is verified, not legalized: add --verify-only"),
    (["mlp_bias.onnx", "-q", "-v"], "-q and -v cannot be used together"),
    # paths: never empty, never an input, never a folder where a file goes
    (["", "-q"], "Invalid value for 'MODEL': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "", "-q"], "Invalid value for 'MODEL': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "-o", ""],
     "Invalid value for '-o' / '--output': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "--report", ""],
     "Invalid value for '--report': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "--html", ""], "Invalid value for '--html': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "--reduce", ""],
     "Invalid value for '--reduce': an empty path names no file (see legalize --help)"),
    (["add.mlirbc", "--verify-only", "--against", ""],
     "Invalid value for '--against': an empty path names no file (see legalize --help)"),
    (["mlp_bias.onnx", "-o", "legal/"], "legal/: is a folder name (it ends in '/'), but -o names a file to write"),
    (["mlp_bias.onnx", "legal/"], "legal/: is a folder name (it ends in '/'), but OUTPUT names a file to write"),
    (["mlp_bias.onnx", "-o", "dir/"], "dir/: is a folder name (it ends in '/'), but -o names a file to write"),
    (["mlp_bias.onnx", "--report", "r/"], "r/: is a folder name (it ends in '/'), but --report names a file to write"),
    (["mlp_bias.onnx", "--html", "h/"], "h/: is a folder name (it ends in '/'), but --html names a file to write"),
    (["mlp_bias.onnx", "--reduce", "r/"], "r/: is a folder name (it ends in '/'), but --reduce names a file to write"),
    (["mlp_bias.onnx", "-o", "out.tflite"],
     "out.tflite: a '.tflite' name, but the legalized model is ONNX: name it '*.onnx' (--emit writes other formats"
     " beside it)"),
    (["mlp_bias.onnx", "out.mlir", "--emit", "onnx", "--emit", "tosa"],
     "out.mlir: a '.mlir' name, but the legalized model is ONNX: name it '*.onnx' (--emit writes other formats"
     " beside it)"),
    (["dyn.tflite", "-o", "out.onnx"],
     "out.onnx: a '.onnx' name, but the legalized model is TFLite: name it '*.tflite' (--emit writes other formats"
     " beside it)"),
    (["mlp_bias.onnx", "-o", "mlp_bias.onnx"], "mlp_bias.onnx: refusing to overwrite the input model"),
    (["mlp_bias.onnx", "--report", "mlp_bias.onnx"], "mlp_bias.onnx: refusing to overwrite the input model"),
    (["mlp_bias.onnx", "--reduce", "mlp_bias.onnx"], "mlp_bias.onnx: refusing to overwrite the input model"),
    (["mlp_bias.onnx", "--html", "mlp_bias.onnx"], "mlp_bias.onnx: the HTML report cannot replace a model file"),
    (["mlp_bias.onnx", "-o", "dir"], "dir: is a directory"),
    (["mlp_bias.onnx", "--report", "dir"], "dir: is a directory"),
    (["mlp_bias.onnx", "-o", "nodir/m.onnx"], "nodir: output directory does not exist"),
    (["mlp_bias.onnx", "--report", "r.json", "--html", "r.json"],
     "r.json: is both the report (--report) and the HTML report (--html); give each its own path"),
    (["nonexist.onnx"], "nonexist.onnx: no such file"),
    (["file.txt"], "file.txt: is a text file, not an ONNX model"),
    (["dir"], "dir: is a directory with no model files in it (*.onnx, *.tflite)"),
    (["mlp_bias.onnx", "--emit", "tflite"], "--emit tflite: only a TFLite model can be written as .tflite"),
    (["mlp_bias.onnx", "--emit", ""],
     "--emit must be one of onnx, tflite, pt2, stablehlo, stablehlo-bytecode, tosa, not ''"),
    (["mlp_bias.onnx", "--target", "xla", "--emit", "tosa"], "--emit tosa writes the tosa form: add --target tosa"),
    (["dyn.tflite", "--reduce", "r.onnx"],
     "--reduce writes ONNX or TOSA MLIR subgraphs: a tflite model is not reduced"),
    (["mlp_bias.onnx", "--provider", "gpu"], "--provider must be auto, cpu, cuda or qnn, not 'gpu'"),
    (["mlp_bias.onnx", "--target", ""], "--target must be one of tosa, xla, litert-gpu, ethos-u, ethos-u55, qnn-htp, coreml, not ''"),
    (["mlp_bias.onnx", "-j", "0"], "Invalid value for '-j' / '--jobs': Input should be greater than or equal to 1"
                                   " (see legalize --help)"),
    (["mlp_bias.onnx", "--localize-budget", "-1"], "Invalid value for '--localize-budget': Input should be greater"
                                                   " than or equal to 1 (see legalize --help)"),
    # several models
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--dim", "Batch=7"],
     f"--dim Batch=7: no model has a dynamic dim 'Batch'; their dims are: N, {DYN_ONNX_DIMS.replace(', N', '')}"),
    (["mlp_bias.onnx", "static.onnx", "-j", "2", "--dim", "M=2"],
     "--dim M=2: no model has a dynamic dim 'M'; their dims are: N"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--input-shape", "q:2x16"],
     "--input-shape q: no model has an input 'q' (their inputs: 'x', 'a', 'b', 'c', 'd', 'e', 'f')"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--input", "y=x.npy"],
     "--input y: no model has an input 'y' (their inputs: 'x', 'a', 'b', 'c', 'd', 'e', 'f')"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--dim", "N=0"],
     "--dim N=0: a size of 0 makes empty inputs, and the check would compare no element"),
    (["mlp_bias.onnx", "dyn.onnx", "-o", "file.txt"],
     "file.txt: exists and is not a folder; with several models, -o names the folder to write them into"),
    (["mlp_bias.onnx", "dyn.onnx", "-o", "file.txt/legal/"], "file.txt/legal: cannot make this folder (-o):"
                                                             " file.txt is not a folder"),
    (["mlp_bias.onnx", "dyn.onnx", "-o", "mlp_bias.onnx"],
     "mlp_bias.onnx: exists and is not a folder; with several models, -o names the folder to write them into"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--verify-only", "--dim", "N=2"],
     f"--dim binds dims for the numeric check: {VERIFY_ONLY_CHECK}"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--reduce", "r.onnx"],
     "--reduce writes one model's subgraph: give one MODEL"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--html", "r.html"],
     "r.html: with several models, --html must name an existing folder (one page per model)"),
    (["mlp_bias.onnx", "dyn.onnx", "-j", "2", "--report", "all/"],
     "all/: is a folder name (it ends in '/'), but --report names a file to write"),
    (["mlp_bias.onnx", "", "-j", "2"], "Invalid value for 'MODEL': an empty path names no file (see legalize --help)"),
]


# the cases of BAD that read a model with an extra's parser
NEEDS = {("add.mlirbc",): "mlir"}


@pytest.mark.parametrize("args,line", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_option_or_combination_is_one_line_exit_2_and_writes_nothing(work, args, line, legalize_in_process):
    if tuple(args) in NEEDS:
        require(NEEDS[tuple(args)])
    before = _tree(work)
    code, out, err = legalize_in_process(*args)
    assert (code, err.splitlines()) == (2, [f"legalize: error: {line}"])
    assert out == ""
    assert _tree(work) == before


@pytest.mark.needs("iree", "litert")
def test_a_tosa_modules_dims_are_its_references(work, legalize_in_process):
    """With --against, a --dim binds a dim of the reference as its runtime declares it
    (input[axis]); any other name is refused, naming the reference and its dims."""
    code, out, err = legalize_in_process("dyn.mlirbc", "--verify-only", "--against", "dyn.tflite", "--dim", "a[0]=2")
    assert (code, err.splitlines()) == (2, [f"legalize: error: --dim a[0]=2: dyn.tflite has no dynamic dim 'a[0]';"
                                            f" its dims are: {DYN_TFLITE_DIMS}"])
    code, out, err = legalize_in_process("dyn.mlirbc", "--verify-only", "--against", "dyn.tflite", "--dim", "x[0]=5",
                                         "--json", "-q")
    assert code == 0, err
    bindings = json.loads(out)["check"]["bindings"]
    assert bindings and all(b["dims"]["x[0]"] == 5 for b in bindings) and all(b["ok"] for b in bindings)


@pytest.mark.needs("torch")
def test_a_pt2_dim_is_a_symbol_of_its_export(work, legalize_in_process):
    code, out, err = legalize_in_process("mlp.pt2", "--dim", "nope=3")
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith("legalize: error: --dim nope=3: the model has no dynamic dim 'nope'; its dims are: ")
    symbol = line.rsplit(": ", 1)[1]
    assert "," not in symbol and symbol != "nope"  # the batch symbol torch.export named
    assert sorted(os.listdir(work)) == sorted([*SOURCES, "dir", "file.txt", "empty.npy", "empty.npz", "x.npy", "fifo",
                                                  "i64.npy", "f64.npy"])


def test_a_dim_that_binds_is_the_one_the_check_uses(work, legalize_in_process):
    code, out, err = legalize_in_process("mlp_bias.onnx", "--dim", "N=5", "--rtol", "y:1e-3", "--rtol", "1e-5",
                                         "--json", "-q")
    assert code == 0, err
    bindings = json.loads(out)["check"]["bindings"]
    assert [(b["dims"], b["ok"], b["source"], b.get("skipped")) for b in bindings] == [({"N": 5}, True, "user", None)]


@pytest.mark.needs("litert")
def test_a_tflite_dim_is_input_axis(work, legalize_in_process):
    code, out, err = legalize_in_process("dyn.tflite", "--dim", "w[1]=6", "--json", "-q")
    assert code == 0, err
    bindings = json.loads(out)["check"]["bindings"]
    assert bindings and all(b["dims"]["w[1]"] == 6 and b["ok"] for b in bindings)


def test_a_batch_binding_binds_where_the_model_has_it(work, legalize_in_process):
    """In a batch, --dim binds the models that have that dim, --input-shape and --input
    the models that have that input; the others run without it, and say so in a warning
    (and their report)."""
    code, out, err = legalize_in_process("mlp_bias.onnx", "dyn.onnx", "-j", "2", "--dim", "M=1", "--input", "x=x.npy",
                                         "--report", "r.json")
    assert code == 0, err
    no_m = "--dim M=1: the model has no dynamic dim 'M' (its dims are: N): not used here"
    no_x = "--input x: the model has no input 'x' (its inputs: 'a', 'b', 'c', 'd', 'e', 'f'): not used here"
    assert err.splitlines() == [f"legalize: warning: {no_m}", f"legalize: warning: {no_x}"]
    mlp, dyn = json.loads((work / "r.json").read_text())
    assert mlp["warnings"] == [no_m] and dyn["warnings"] == [no_x]
    assert [(b["dims"], b["source"]) for b in mlp["check"]["bindings"]] == [({"N": 2}, "user")]  # x.npy is 2x16
    assert dyn["check"]["ok"] and all(b["dims"]["M"] == 1 for b in dyn["check"]["bindings"])


def _empty_model(path: Path, x_shape) -> Path:
    """z = x + y, x of shape ``x_shape`` (a static 0 makes every run empty), y [3]."""
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, x_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_a_check_of_empty_outputs_is_not_a_pass(tmp_path, legalize_in_process):
    """A model whose inputs are empty (a static size-0 dim: no option can refuse it)
    compares no element: the binding is skipped, the check did not run, and with
    --require-check the run fails with nothing written."""
    src = _empty_model(tmp_path / "empty.onnx", [0, 3])
    code, out, err = legalize_in_process(src, "--json", "-q")
    assert code == 0, err
    check = json.loads(out)["check"]
    why = "no element was compared: every output is empty at each binding tried"
    assert (check["ran"], check["ok"], check["error"]) == (False, None, why)
    assert [b["skipped"] for b in check["bindings"]] == ["every output is empty at these dims: no element was compared"]
    assert err.splitlines() == [f"{src}: legalized for 'tosa' -> {tmp_path / 'empty.legal.onnx'} (not checked: {why})"]
    assert "PASSED" not in out + err
    (tmp_path / "empty.legal.onnx").unlink()
    code, out, err = legalize_in_process(src, "--require-check", "-q")
    assert code == 1
    assert out.splitlines() == [f"{src}: the check is required (--require-check) and the numeric check did not run:"
                                f" {why}; nothing written"]
    assert not (tmp_path / "empty.legal.onnx").exists()


def test_the_library_refuses_what_the_command_refuses(tmp_path):
    import legalizer

    src = shutil.copy(MODELS / "dynamic_broadcast.onnx", tmp_path / "m.onnx")
    legal = legalizer.legalize(onnx.load(str(src)))
    with pytest.raises(legalizer.LegalizeError, match=r"^--dim Batch=7: the model has no dynamic dim 'Batch'"):
        legalizer.check(src, legal, dims={"Batch": 7})
    with pytest.raises(legalizer.LegalizeError, match=r"^--dim M=0: a size of 0 makes empty inputs"):
        legalizer.check(src, legal, dims={"M": 0})
    with pytest.raises(legalizer.LegalizeError, match=r"^input shape 'a' \(0x3\): dim 0 is 0: an empty input"):
        legalizer.check(src, legal, input_shapes={"a": (0, 3)})


@pytest.mark.parametrize("verify_only", [False, True])
def test_reduce_with_nothing_to_reduce_says_so(work, verify_only, legalize_in_process):
    """--reduce on a legal model whose check passes writes nothing, and says why."""
    args = ["--verify-only"] if verify_only else []
    code, out, err = legalize_in_process("mlp_bias.onnx", *args, "--reduce", "r.onnx", "--json")
    assert code == 0, err
    why = "--reduce: nothing written: no violation, and no differing output, was found"
    assert json.loads(out)["warnings"] == [why]
    assert f"legalize: warning: {why}" in err.splitlines()
    assert not (work / "r.onnx").exists()


@pytest.mark.parametrize("given", ["x=empty.npy", "empty.npz"])
def test_an_empty_input_array_is_data_and_empty_outputs_are_no_pass(work, given, legalize_in_process):
    """An empty --input array is data (a shape of length 0 is one); where it makes every
    output empty, nothing was compared: not PASSED, the check did not run."""
    np.savez(work / "empty.npz", x=np.zeros((0, 16), np.float32))
    code, out, err = legalize_in_process("mlp_bias.onnx", "--input", given, "--force", "--json", "-q")
    assert code == 0, err
    check = json.loads(out)["check"]
    assert (check["ran"], check["ok"]) == (False, None)
    assert check["error"] == "no element was compared: every output is empty at each binding tried"
    assert "PASSED" not in out + err
