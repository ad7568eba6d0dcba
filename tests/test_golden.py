"""Golden data: the check's inputs and outputs saved and loaded in Polygraphy's JSON and
.npz (--save-inputs, --save-outputs, --load-inputs, --load-outputs), a data loader
script, and the statistics of a check over several samples. The round trips with
Polygraphy itself run when the polygraphy package is installed."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from helpers import lines
from needs import polygraphy_command
from legalizer.numeric import polygraphy_json
from legalizer.numeric.golden import read_inputs, read_outputs

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "models" / "mlp_bias.onnx"  # x: N x 16 float -> y: N x 8
DYN = ROOT / "models" / "dynamic_broadcast.onnx"  # a..f, three outputs ab, cd, y


def _mlp_samples(n: int, batch: int = 2):
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((batch + k, 16)).astype(np.float32)} for k in range(n)]


def _mlp_reference(samples):
    import onnxruntime as ort

    s = ort.InferenceSession(str(MLP), providers=["CPUExecutionProvider"])
    return [{"y": s.run(None, feed)[0]} for feed in samples]


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


# -- the format, against Polygraphy's own encoder and decoder ---------------------------

def test_arrays_round_trip_through_our_json():
    samples = [{"x": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array([True, False]),
                "i": np.array(7, dtype=np.int64)}]
    back = polygraphy_json.load_inputs(polygraphy_json.dump_inputs(samples), 1 << 20)
    assert len(back) == 1 and list(back[0]) == ["x", "m", "i"]
    for name, a in samples[0].items():
        assert back[0][name].dtype == a.dtype and back[0][name].shape == a.shape
        np.testing.assert_array_equal(back[0][name], a)
    runs = [("ref", [{"y": np.ones((2, 2), np.float16)}, {"y": np.zeros(3, np.float16)}])]
    got = polygraphy_json.load_runs(polygraphy_json.dump_runs(runs), 1 << 20)
    assert [n for n, _ in got] == ["ref"] and len(got[0][1]) == 2
    np.testing.assert_array_equal(got[0][1][1]["y"], np.zeros(3, np.float16))


@pytest.mark.needs("polygraphy")
def test_polygraphy_reads_what_we_write_and_we_read_what_it_writes(tmp_path):
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json, save_json

    samples = [{"x": np.arange(32, dtype=np.float32).reshape(2, 16)}, {"x": -np.ones((3, 16), np.float32)}]
    ours = tmp_path / "ours_inputs.json"
    ours.write_text(polygraphy_json.dump_inputs(samples))
    theirs = load_json(str(ours))
    assert [list(f) for f in theirs] == [["x"], ["x"]]
    np.testing.assert_array_equal(theirs[1]["x"], samples[1]["x"])

    runs = [("original-onnxrt", [{"y": np.full((2, 8), 0.5, np.float32)}]),
            ("legalized-onnxrt", [{"y": np.full((2, 8), 0.25, np.float32)}])]
    outs = tmp_path / "ours_outputs.json"
    outs.write_text(polygraphy_json.dump_runs(runs))
    results = RunResults.load(str(outs))
    assert [name for name, _ in results.items()] == ["original-onnxrt", "legalized-onnxrt"]
    np.testing.assert_array_equal(results["legalized-onnxrt"][0]["y"], runs[1][1][0]["y"])

    # and the other way: Polygraphy's own encoder
    save_json(samples, str(tmp_path / "theirs_inputs.json"))
    back = read_inputs(tmp_path / "theirs_inputs.json")
    np.testing.assert_array_equal(back[0]["x"], samples[0]["x"])
    results.save(str(tmp_path / "theirs_outputs.json"))
    name, got, others = read_outputs(tmp_path / "theirs_outputs.json")
    assert (name, others) == ("original-onnxrt", ["legalized-onnxrt"])
    np.testing.assert_array_equal(got[0]["y"], runs[0][1][0]["y"])


# -- the command line ---------------------------------------------------------------

def _polygraphy() -> str:
    exe = polygraphy_command()
    assert exe is not None  # the test is marked needs("polygraphy")
    return exe


@pytest.mark.parametrize("model", [MLP, DYN], ids=["mlp_bias", "dynamic_broadcast"])
@pytest.mark.needs("polygraphy")
def test_polygraphy_run_saved_data_replayed_by_legalize(tmp_path, model, legalize_in_process):
    """``polygraphy run --save-inputs/--save-outputs`` on a real model, replayed: the
    legalized model matches the stored outputs (Polygraphy passes too), and a reference
    with one sample's output moved by 1e-3 fails both, on that sample."""
    exe = _polygraphy()
    i, o = tmp_path / "i.json", tmp_path / "o.json"
    p = subprocess.run([exe, "run", str(model), "--onnxrt", "--iterations", "3", "--save-inputs", str(i),
                        "--save-outputs", str(o)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    legal, rep = tmp_path / "m.legal.onnx", tmp_path / "r.json"
    code, out, err = legalize_in_process(model, legal, "--load-inputs", i, "--load-outputs", o, "--report", rep)
    assert code == 0, err
    check = _report(rep)["check"]
    assert check["ok"] and [b["sample"] for b in check["bindings"]] == [0, 1, 2]
    assert check["reference"].startswith("o.json (onnxrt-runner")
    assert check["samples"]["count"] == 3
    assert {e["name"] for e in check["samples"]["outputs"]} == set(read_outputs(o)[1][0])

    raw = json.loads(o.read_text())
    first = next(iter(raw["lst"][0][1][1]["outputs"].values()))["values"]
    a = np.load(io.BytesIO(base64.b64decode(first["array"])))
    buf = io.BytesIO()
    np.save(buf, (a + np.float32(1e-3)).astype(a.dtype))
    first["array"] = base64.b64encode(buf.getvalue()).decode()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    legal2 = tmp_path / "m2.legal.onnx"
    code, out, err = legalize_in_process(model, legal2, "--load-inputs", i, "--load-outputs", bad, "--report", rep,
                                         "--no-localize")
    assert code == 1 and not legal2.exists()
    check = _report(rep)["check"]
    assert [b["ok"] for b in check["bindings"]] == [True, False, True]
    name = next(iter(raw["lst"][0][1][1]["outputs"]))
    entry = next(e for e in check["samples"]["outputs"] if e["name"] == name)
    assert entry["failed"] == [1] and entry["worst_sample"] == 1
    assert entry["max_abs_err"] == pytest.approx(1e-3, rel=1e-2)
    assert f"FAILED | Output: '{name}' | 3 samples, 1 failed" in out

    # Polygraphy's own verdict on the same files, at the same tolerances
    for ref, want in ((o, 0), (bad, 1)):
        p = subprocess.run([exe, "run", str(legal), "--onnxrt", "--load-inputs", str(i), "--load-outputs", str(ref),
                            "--rtol", "1e-4", "--atol", "1e-5"], capture_output=True, text=True, timeout=300)
        assert (p.returncode != 0) == bool(want), p.stdout[-2000:]


@pytest.mark.needs("polygraphy")
def test_legalize_saved_data_replayed_by_polygraphy(tmp_path, legalize_in_process):
    exe = _polygraphy()
    i, o, legal = tmp_path / "si.json", tmp_path / "so.json", tmp_path / "m.legal.onnx"
    code, out, err = legalize_in_process(DYN, legal, "--save-inputs", i, "--save-outputs", o)
    assert code == 0, err
    name, ref, others = read_outputs(o)
    assert (name, others) == ("original-onnxrt", ["legalized-onnxrt"])
    assert len(ref) == len(read_inputs(i)) >= 2  # one per dim binding of the check
    p = subprocess.run([exe, "run", str(legal), "--onnxrt", "--load-inputs", str(i), "--load-outputs", str(o)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    assert f"Passed: {len(ref)}/{len(ref)} iterations" in p.stdout + p.stderr


def test_npz_round_trip_and_several_samples(tmp_path, legalize_in_process):
    samples = _mlp_samples(3)
    expected = _mlp_reference(samples)
    i, o = tmp_path / "i.npz", tmp_path / "o.npz"
    np.savez(i, **{f"{k}/x": s["x"] for k, s in enumerate(samples)})
    np.savez(o, **{f"{k}/y": e["y"] for k, e in enumerate(expected)})
    rep = tmp_path / "r.json"
    si, so = tmp_path / "saved_i.npz", tmp_path / "saved_o.npz"
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i, "--load-outputs", o,
                                         "--report", rep, "--save-inputs", si, "--save-outputs", so)
    assert code == 0, err
    check = _report(rep)["check"]
    # each sample binds the batch dim by its own array
    assert [b["dims"] for b in check["bindings"]] == [{"N": 2}, {"N": 3}, {"N": 4}]
    assert check["saved"] == {"inputs": str(si), "outputs": str(so)}
    with np.load(si) as z:
        assert sorted(z.files) == ["0/x", "1/x", "2/x"]
        np.testing.assert_array_equal(z["2/x"], samples[2]["x"])
    with np.load(so) as z:
        np.testing.assert_array_equal(z["1/y"], expected[1]["y"])
    entry = check["samples"]["outputs"][0]
    assert entry["samples"] == 3 and entry["total"] == (2 + 3 + 4) * 8
    assert sum(entry["histogram"]["counts"]) == entry["total"]


def test_data_loader_script_yields_the_samples(tmp_path, legalize_in_process):
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\n"
                      "def feeds():\n"
                      "    for n in (1, 5):\n"
                      "        yield {'x': np.full((n, 16), 0.5, np.float32)}\n")
    rep = tmp_path / "r.json"
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--data-loader-script", f"{script}:feeds",
                                         "--report", rep, "-v")
    assert code == 0, err
    check = _report(rep)["check"]
    assert [(b["sample"], b["dims"]) for b in check["bindings"]] == [(0, {"N": 1}), (1, {"N": 5})]
    assert "PASSED | Output: 'y' | 2 samples, 0 failed" in out
    assert "abs err histogram:" in out


def test_data_loader_script_failure_is_one_line(tmp_path, legalize_in_process):
    script = tmp_path / "loader.py"
    script.write_text("def load_data():\n    raise RuntimeError('no data here')\n    yield {}\n")
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--data-loader-script", script)
    assert code == 2 and err.strip().count("\n") == 0
    assert "the script failed: RuntimeError: no data here" in err
    assert not (tmp_path / "m.legal.onnx").exists()


def test_help_says_the_script_runs(legalize_in_process):
    code, out, err = legalize_in_process("--help")
    assert "RUNS the script's code" in " ".join(out.split())


# -- untrusted golden files -----------------------------------------------------------

def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _json_inputs(tmp_path, payload: bytes, name="x") -> Path:
    f = tmp_path / "in.json"
    f.write_text(json.dumps([{name: {"array": base64.b64encode(payload).decode(), "polygraphy_class": "ndarray"}}]))
    return f


@pytest.mark.parametrize("case, words", [
    ("truncated", "declares shape [2, 4] and dtype float32 (32 bytes) but holds 16 bytes"),
    ("huge", "an array of shape [1000000, 1000000] and dtype float32 would take 3.73e+03 GiB, more than the"
             " check takes (1 GiB)"),
    ("object", "holds Python objects (dtype object), which are never unpickled"),
    ("not_base64", "the array is not base64"),
])
def test_bad_json_inputs_are_refused_before_inflating(tmp_path, case, words, legalize_in_process):
    good = _npy(np.zeros((2, 4), np.float32))
    if case == "truncated":
        f = _json_inputs(tmp_path, good[:-16])
    elif case == "huge":
        header = good[:good.index(b"(2, 4)")] + b"(1000000, 1000000)" + good[good.index(b"(2, 4)") + 6:]
        f = _json_inputs(tmp_path, header[:128])
    elif case == "object":
        f = _json_inputs(tmp_path, good.replace(b"'<f4'", b"'|O' "))
    else:
        f = tmp_path / "in.json"
        f.write_text(json.dumps([{"x": {"array": "***", "polygraphy_class": "ndarray"}}]))
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", f)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert f"--load-inputs {f}: iteration 0, input 'x': {words}" in err
    assert not (tmp_path / "m.legal.onnx").exists()


def test_npz_bomb_is_refused_by_its_declared_size(tmp_path, legalize_in_process):
    f = tmp_path / "bomb.npz"
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as m:
            m.write(_npy(np.zeros((1, 16), np.float32))[:128])
            chunk = bytes(1 << 24)
            for _ in range(80):  # 1.25 GiB of zeros, a few MB on disk
                m.write(chunk)
    assert f.stat().st_size < 16 << 20
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", f)
    assert code == 2 and "array 'x' inflates to 1.25 GiB, more than the check takes (1 GiB)" in err


@pytest.mark.parametrize("args, words", [
    (["--load-outputs", "{o}"], "--load-outputs compares with outputs computed from stored inputs"),
    (["--load-inputs", "{i}", "--data-loader-script", "x.py"], "--load-inputs and --data-loader-script both"),
    (["--load-inputs", "{i}", "--no-check"], "--load-inputs feeds or saves the numeric check: it cannot go with"
                                             " --no-check"),
    (["--load-inputs", "{o}"], "expected a dict of input names to arrays (is this --save-outputs data?)"),
    (["--load-inputs", "{i}", "--load-outputs", "{i}"], "not Polygraphy run results (a RunResults object)"
                                                        " (is this --save-inputs data?)"),
    (["--save-inputs", "{model}"], "m.onnx: refusing to overwrite the input model"),
    (["--save-inputs", "{i}"], "already exists (use --force to replace it)"),
    (["--save-inputs", "{i}", "--load-inputs", "{i}", "--force"], "is the loaded inputs (--load-inputs) and the saved inputs"),
    (["--input", "x={x}", "--load-inputs", "{i}"], "--input and --load-inputs (or --data-loader-script) both"),
])
def test_golden_usage_errors(tmp_path, args, words, legalize_in_process):
    model = tmp_path / "m.onnx"
    shutil.copy(MLP, model)
    i, o, x = tmp_path / "i.json", tmp_path / "o.json", tmp_path / "x.npy"
    i.write_text(polygraphy_json.dump_inputs(_mlp_samples(1)))
    o.write_text(polygraphy_json.dump_runs([("r", _mlp_reference(_mlp_samples(1)))]))
    np.save(x, _mlp_samples(1)[0]["x"])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = legalize_in_process(model, *[a.format(i=i, o=o, x=x, model=model) for a in args])
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_stored_outputs_must_fit_the_model(tmp_path, legalize_in_process):
    samples = _mlp_samples(2)
    i, o = tmp_path / "i.json", tmp_path / "o.json"
    i.write_text(polygraphy_json.dump_inputs(samples))
    o.write_text(polygraphy_json.dump_runs([("r", [{"z": np.zeros(1)}, {"z": np.zeros(1)}])]))
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i, "--load-outputs", o)
    assert code == 2 and "none of its outputs (z) is an output of the model (its outputs: y)" in err
    o.write_text(polygraphy_json.dump_runs([("r", _mlp_reference(samples[:1]))]))
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i, "--load-outputs", o)
    assert code == 2 and "--load-outputs holds 1 samples, but the inputs 2" in err


def test_a_sample_that_does_not_fit_the_model_is_named(tmp_path, legalize_in_process):
    i = tmp_path / "i.json"
    i.write_text(polygraphy_json.dump_inputs([{"x": np.zeros((1, 16), np.float32)},
                                              {"x": np.zeros((1, 5), np.float32)}]))
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i)
    assert code == 2 and "sample 1: input array 'x' (1x5): dim 1 is 5, but input 'x' is declared 'Nx16'" in err


def test_saved_files_are_written_even_when_the_check_fails(tmp_path, legalize_in_process):
    """A failed check is what gets replayed elsewhere: its inputs and outputs are saved."""
    samples = _mlp_samples(2)
    expected = _mlp_reference(samples)
    expected[0]["y"] = expected[0]["y"] + 1
    i, o = tmp_path / "i.json", tmp_path / "o.json"
    i.write_text(polygraphy_json.dump_inputs(samples))
    o.write_text(polygraphy_json.dump_runs([("device", expected)]))
    so = tmp_path / "so.json"
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i, "--load-outputs", o,
                                         "--save-outputs", so, "--no-localize")
    assert code == 1 and not (tmp_path / "m.legal.onnx").exists()
    name, ref, others = read_outputs(so)
    assert (name, others) == ("device", ["legalized-onnxrt"])
    np.testing.assert_array_equal(ref[0]["y"], expected[0]["y"])


@pytest.mark.needs("polygraphy")
def test_polygraphy_per_iteration_folders_are_read(tmp_path, legalize_in_process):
    """``polygraphy run --save-inputs DIR --save-outputs DIR`` (paths without a suffix)
    writes one JSON file per iteration: legalize reads the folders in name order."""
    exe = _polygraphy()
    i, o = tmp_path / "inputs", tmp_path / "outputs"
    p = subprocess.run([exe, "run", str(MLP), "--onnxrt", "--iterations", "2", "--save-inputs", str(i),
                        "--save-outputs", str(o)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(list(i.glob("*.json"))) == len(list(o.glob("*.json"))) == 2
    rep = tmp_path / "r.json"
    code, out, err = legalize_in_process(MLP, tmp_path / "m.legal.onnx", "--load-inputs", i, "--load-outputs", o,
                                         "--report", rep)
    assert code == 0, err
    check = _report(rep)["check"]
    assert check["ok"] and [b["sample"] for b in check["bindings"]] == [0, 1]
    samples = read_inputs(i)
    np.testing.assert_array_equal(samples[1]["x"], polygraphy_json.load_inputs(
        sorted(i.glob("*.json"))[1].read_text(), 1 << 30)[0]["x"])


def test_library_check_over_stored_samples(tmp_path, legalize_in_process):
    import legalizer

    samples = _mlp_samples(2)
    expected = _mlp_reference(samples)
    legal = tmp_path / "m.legal.onnx"
    assert legalize_in_process(MLP, legal, "-q")[0] == 0
    # (on the CPU, where the reference outputs were computed: a GPU's differ in the last bits)
    result = legalizer.check(MLP, legal, samples=samples, provider="cpu")
    assert result.ok and [b.sample for b in result.bindings] == [0, 1] and result.samples["count"] == 2
    o = tmp_path / "o.json"
    expected[1]["y"] = expected[1]["y"] + 1
    o.write_text(polygraphy_json.dump_runs([("device", expected)]))
    i = tmp_path / "i.npz"
    np.savez(i, **{f"{k}/x": s["x"] for k, s in enumerate(samples)})
    result = legalizer.check(MLP, legal, samples=i, expected=o, provider="cpu")
    assert not result.ok and [b.ok for b in result.bindings] == [True, False]
    assert result.reference == "o.json (device)"
    assert result.samples["outputs"][0]["worst_sample"] == 1
    assert result.samples["outputs"][0]["max_abs_err"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.needs("litert")
def test_tflite_check_takes_samples_and_saves_its_runs(tmp_path, legalize_in_process):
    """A TFLite model's check (LiteRT, and onnxruntime on its ONNX form) fed by a data
    loader script, its runs saved and replayed as the reference."""
    model = ROOT / "models" / "tflite" / "broadcast_add.tflite"  # x: 2x3x4x5, y: 5
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\n"
                      "def load_data():\n"
                      "    for k in range(3):\n"
                      "        yield {'x': np.full((2, 3, 4, 5), k, np.float32), 'y': np.arange(5, dtype=np.float32)}\n")
    rep, si, so = tmp_path / "r.json", tmp_path / "si.npz", tmp_path / "so.json"
    code, out, err = legalize_in_process(model, tmp_path / "b.legal.tflite", "--data-loader-script", script,
                                         "--report", rep, "--save-inputs", si, "--save-outputs", so)
    assert code == 0, err
    check = _report(rep)["check"]
    assert [b["sample"] for b in check["bindings"]] == [0, 1, 2] and check["samples"]["count"] == 3
    with np.load(si) as z:
        np.testing.assert_array_equal(z["2/x"], np.full((2, 3, 4, 5), 2, np.float32))
    name, ref, others = read_outputs(so)
    assert (name, others) == ("original-litert", ["legalized-litert"]) and len(ref) == 3
    np.testing.assert_array_equal(ref[1]["out0"], np.full((2, 3, 4, 5), 1, np.float32) + np.arange(5, dtype=np.float32))
    # replayed: the saved reference passes; one sample's output moved by 1e-3 fails that sample
    code, out, err = legalize_in_process(model, tmp_path / "c.legal.tflite", "--load-inputs", si, "--load-outputs", so,
                                         "--report", rep)
    assert code == 0, err
    assert _report(rep)["check"]["reference"] == "so.json (original-litert)"
    ref[2]["out1"] = ref[2]["out1"] + np.float32(1e-3)
    bad = tmp_path / "bad.json"
    bad.write_text(polygraphy_json.dump_runs([("device", ref)]))
    code, out, err = legalize_in_process(model, tmp_path / "d.legal.tflite", "--load-inputs", si, "--load-outputs", bad,
                                         "--report", rep, "--no-localize")
    assert code == 1 and not (tmp_path / "d.legal.tflite").exists()
    check = _report(rep)["check"]
    assert [b["ok"] for b in check["bindings"]] == [True, True, False]
    failed = {o["name"] for o in check["bindings"][2]["outputs"] if not o["ok"]}
    assert failed and all(n.startswith("out1") for n in failed)


# -- golden data bounded before it is allocated ----------------------------------------

CAP = 2 * 10**9  # the refusals below happen well inside it; before them, each case took 3-6 GB


def _capped():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _header(shape) -> bytes:
    """A .npy header of float32 declaring ``shape`` (as np.save writes one, any dims)."""
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (tuple(shape),)
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode()


@pytest.mark.parametrize("case", ["npz_member_name", "json_inputs", "json_outputs"])
def test_sample_counts_are_bounded_before_allocation(tmp_path, case, legalize):
    """A 292-byte .npz whose member is '99999999999/x.npy' took 5.9 GB, 60 MB of JSON
    '{}' samples 3.1 GB: the samples are counted (from the member names; from the list,
    an element at a time) before the rest is read or any array made."""
    x = _npy(np.zeros((2, 4), np.float32))
    if case == "npz_member_name":
        f = tmp_path / "in.npz"
        with zipfile.ZipFile(f, "w") as z:
            z.writestr("99999999999/x.npy", x)
        args = ["--load-inputs", f]
        words = f"--load-inputs {f}: array '99999999999/x' is sample 99999999999, more than a check runs (10000 samples)"
    elif case == "json_inputs":
        f = tmp_path / "in.json"
        f.write_text("[" + ", ".join(["{}"] * 15_000_000) + "]")  # 60 MB
        args = ["--load-inputs", f]
        words = f"--load-inputs {f}: more than 10000 iterations, more than a check runs (10000 samples)"
    else:
        i = _json_inputs(tmp_path, x)
        f = tmp_path / "out.json"
        f.write_text('{"polygraphy_class": "RunResults", "lst": [["r", [' + ", ".join(["{}"] * 15_000_000) + "]]]}")
        args = ["--load-inputs", i, "--load-outputs", f]
        words = f"--load-outputs {f}: not run results: more than 1,000,000 JSON objects"
    p = legalize(MLP, tmp_path / "m.legal.onnx", *args, preexec_fn=_capped)
    assert p.returncode == 2 and lines(p.stderr) == [f"legalize: error: {words}"], p.stderr[-2000:]
    assert not (tmp_path / "m.legal.onnx").exists()


@pytest.mark.parametrize("shape, words", [
    ((-2, -3), "dim -2 is negative"),
    ((0, 2**70), f"dim {2**70} is more elements of float32 than the check takes (1 GiB)"),
])
@pytest.mark.parametrize("form", ["json", "npz"])
def test_npy_headers_with_negative_or_huge_dims_are_one_line(tmp_path, shape, words, form, legalize):
    data = _header(shape) + bytes(24 if shape[0] < 0 else 0)  # (-2, -3) "holds" its 6 elements
    if form == "json":
        f = _json_inputs(tmp_path, data)
        where = "iteration 0, input 'x'"
    else:
        f = tmp_path / "in.npz"
        with zipfile.ZipFile(f, "w") as z:
            z.writestr("x.npy", data)
        where = "array 'x'"
    p = legalize(MLP, tmp_path / "m.legal.onnx", "--load-inputs", f, preexec_fn=_capped)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: --load-inputs {f}: {where}: declares shape"
                                                   f" {list(shape)}: {words}"])


@pytest.mark.parametrize("shape, words", [
    ((-2, -3), ": dim -2 is negative"),
    ((0, 2**70), f" (0 bytes), but its dim {2**70} alone is over the limit of {4 << 30:,}"),
])
def test_input_npy_headers_with_negative_or_huge_dims_are_one_line(tmp_path, shape, words, legalize):
    f = tmp_path / "x.npy"
    f.write_bytes(_header(shape) + bytes(24 if shape[0] < 0 else 0))
    z = tmp_path / "in.npz"
    with zipfile.ZipFile(z, "w") as archive:
        archive.writestr("x.npy", f.read_bytes())
    declared = "x".join(map(str, shape))
    for arg, what in ((f"x={f}", f"x: array '{f}'"), (str(z), f"{z}: array 'x'")):
        p = legalize(MLP, tmp_path / "m.legal.onnx", "--input", arg, preexec_fn=_capped)
        assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: --input {what} declares {declared} of"
                                                       f" float32{words}; refusing to read it"])
