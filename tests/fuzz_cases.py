"""Hostile input for ``legalize``: mutations of the sample models, and a runner that holds
each outcome to the CLI's contract (docs/cli.md). Used by tests/test_fuzz.py
(hypothesis picks the cases) and, for a long campaign, as a script:

    python tests/fuzz_cases.py --cases 3000 --jobs 2     # counts by kind, failures grouped

A mutation is ``(kind, source, seed)``: ``kind`` names what is done (byte-level:
truncate, flip bytes, insert or delete bytes; structural, on the ONNX ModelProto or the
TFLite flatbuffer through ``legalizer.kinds.tflite.schema``: huge dims, negative dims, rank-100
shapes, cycles, dangling value names, duplicate outputs, wrong data lengths, bad
indices, wild attributes), ``seed`` makes it reproducible.

Each case runs ``legalize MODEL -o OUT -q`` (the whole job: load, verify, legalize,
check on onnxruntime/LiteRT, write) in a forked child of a clean fork server, with
stdout and stderr at the file-descriptor level (so that native runtimes' prints count),
an address-space limit and a time limit. The contract: exit 0, 1 or 2; stderr at most
one line (exactly one ``legalize: error: `` line for exit 2), never a traceback, an
internal error or "out of memory"; no file left but the input and, on exit 0, the
output; the input unchanged; within the time limit.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
sys.path.insert(0, str(ROOT))  # run as a script, too
from legalizer.pipeline import is_output  # noqa: E402

ONNX_SOURCES = sorted(p.name for p in MODELS.glob("*.onnx") if not is_output(p))
TFLITE_SOURCES = sorted(f"tflite/{p.name}" for p in (MODELS / "tflite").glob("*.tflite") if not is_output(p))

HUGE = [2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1]
MEMORY_LIMIT = 3 << 30  # bytes of address space for one case
TIME_LIMIT = 60.0  # seconds for one case


# ---- byte-level mutations (any format) ------------------------------------------------

def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(1, len(data))]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256) if rng.random() < 0.5 else b[i] ^ (1 << rng.randrange(8))
    return bytes(b)


def insert_delete(data: bytes, rng: random.Random) -> bytes:
    """Wrong lengths: bytes inserted or cut out in the middle, so that every length and
    offset after that point is off."""
    i = rng.randrange(len(data))
    n = rng.randint(1, 16)
    if rng.random() < 0.5:
        return data[:i] + bytes(rng.randrange(256) for _ in range(n)) + data[i:]
    return data[:i] + data[i + n:]


BYTE_KINDS: Dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncate": truncate, "flip_bytes": flip_bytes, "insert_delete": insert_delete}


# ---- ONNX structural mutations --------------------------------------------------------

def _onnx_value_infos(m) -> list:
    g = m.graph
    return [v for v in list(g.input) + list(g.output) + list(g.value_info) if v.type.HasField("tensor_type")]


def _onnx_dim(m, rng, value):
    vis = [v for v in _onnx_value_infos(m) if v.type.tensor_type.HasField("shape")
           and len(v.type.tensor_type.shape.dim)]
    if not vis:
        return False
    d = rng.choice(rng.choice(vis).type.tensor_type.shape.dim)
    d.Clear()
    d.dim_value = value
    return True


def onnx_huge_dim(m, rng):
    return _onnx_dim(m, rng, rng.choice(HUGE))


def onnx_negative_dim(m, rng):
    return _onnx_dim(m, rng, -rng.randint(1, 5))


def onnx_rank100(m, rng):
    vis = _onnx_value_infos(m)
    if not vis:
        return False
    shape = rng.choice(vis).type.tensor_type.shape
    shape.Clear()
    style = rng.choice(["ones", "twos", "symbols", "mixed"])
    for k in range(100):
        d = shape.dim.add()
        if style == "ones":
            d.dim_value = 1
        elif style == "twos":
            d.dim_value = 2
        elif style == "symbols":
            d.dim_param = f"s{k}"
        else:
            d.dim_value = rng.choice([1, 2, 3])
    return True


def onnx_cycle(m, rng):
    nodes = m.graph.node
    if not nodes:
        return False
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    if not nodes[i].input or not nodes[j].output:
        return False
    nodes[i].input[rng.randrange(len(nodes[i].input))] = rng.choice(list(nodes[j].output))
    return True


def onnx_dangling(m, rng):
    g = m.graph
    choices = [(n.input, k) for n in g.node for k in range(len(n.input))] + [(None, k) for k in range(len(g.output))]
    if not choices:
        return False
    seq, k = rng.choice(choices)
    if seq is None:
        g.output[k].name = f"ghost_{rng.randrange(1000)}"
    else:
        seq[k] = f"ghost_{rng.randrange(1000)}"
    return True


def onnx_duplicate_output(m, rng):
    g = m.graph
    how = rng.choice(["graph_output", "node_output", "input_name"])
    if how == "graph_output" and g.output:
        g.output.append(g.output[rng.randrange(len(g.output))])
    elif how == "node_output" and len(g.node) > 1:
        a, b = rng.sample(range(len(g.node)), 2)
        if not g.node[a].output or not g.node[b].output:
            return False
        g.node[b].output[0] = g.node[a].output[0]
    elif how == "input_name" and g.node and g.input:
        n = rng.choice(list(g.node))
        if not n.output:
            return False
        n.output[0] = rng.choice(list(g.input)).name
    else:
        return False
    return True


def onnx_initializer(m, rng):
    """Wrong data lengths and huge dims on a constant: dims that disagree with the data."""
    g = m.graph
    if not g.initializer:
        return False
    t = rng.choice(list(g.initializer))
    how = rng.choice(["huge", "negative", "more", "fewer", "rank100", "raw_cut"])
    dims = list(t.dims)
    if how == "huge":
        dims = (dims or [1])[:-1] + [rng.choice(HUGE)]
    elif how == "negative":
        dims = (dims or [1])[:-1] + [-rng.randint(1, 3)]
    elif how == "more":
        dims = dims + [rng.randint(2, 7)]
    elif how == "fewer":
        dims = [max(1, d // 2) for d in dims] or [0]
    elif how == "rank100":
        dims = [1] * 99 + [rng.randint(1, 3)]
    elif how == "raw_cut":
        if t.raw_data:
            t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
        return True
    del t.dims[:]
    t.dims.extend(dims)
    return True


def onnx_attribute(m, rng):
    """A wild value in an int or ints attribute (an axis, a perm, a shape)."""
    attrs = [a for n in m.graph.node for a in n.attribute if a.type in (2, 7)]  # INT, INTS
    if not attrs:
        return False
    a = rng.choice(attrs)
    wild = rng.choice([-(2**62), -100, -1, 0, 100, 2**40, 2**63 - 1])
    if a.type == 2:
        a.i = wild
    elif a.ints:
        a.ints[rng.randrange(len(a.ints))] = wild
    else:
        a.ints.append(wild)
    return True


def onnx_constant_shape(m, rng):
    """A shape operand (Reshape, Expand, Tile, ...) fed by a constant: huge, negative or
    rank-100 values."""
    import numpy as np
    from onnx import numpy_helper

    ints = [t for t in m.graph.initializer if t.data_type == 7 and len(t.dims) == 1]
    if not ints:
        return False
    t = rng.choice(ints)
    vals = rng.choice([[rng.choice(HUGE)], [-5], [1] * 100, [2**31, 2**31], [0, -1]])
    t.CopyFrom(numpy_helper.from_array(np.array(vals, np.int64), t.name))
    return True


def onnx_drop_node(m, rng):
    if not m.graph.node:
        return False
    del m.graph.node[rng.randrange(len(m.graph.node))]
    return True


def onnx_opset(m, rng):
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = rng.choice([-1, 0, 1, 5, 6, 99, 2**40])
            return True
    return False


def onnx_elem_type(m, rng):
    """A declared element type changed: a string, an unknown code, undefined, a float8."""
    vis = _onnx_value_infos(m)
    if not vis:
        return False
    rng.choice(vis).type.tensor_type.elem_type = rng.choice([0, 8, 9, 17, 23, 99, 2**20])
    return True


ONNX_KINDS = {
    "onnx_huge_dim": onnx_huge_dim, "onnx_negative_dim": onnx_negative_dim, "onnx_rank100": onnx_rank100,
    "onnx_cycle": onnx_cycle, "onnx_dangling": onnx_dangling, "onnx_duplicate_output": onnx_duplicate_output,
    "onnx_initializer": onnx_initializer, "onnx_attribute": onnx_attribute,
    "onnx_constant_shape": onnx_constant_shape, "onnx_drop_node": onnx_drop_node, "onnx_opset": onnx_opset,
    "onnx_elem_type": onnx_elem_type,
}


# ---- TFLite structural mutations ------------------------------------------------------

def _sg(t, rng):
    return rng.choice(t.fields["subgraphs"])


def _tensor(t, rng):
    sg = _sg(t, rng)
    return rng.choice(sg.fields["tensors"]) if sg.fields.get("tensors") else None


def _set_shape(tensor, dims, signature: Optional[bool] = None):
    import numpy as np

    tensor.fields["shape"] = np.array(dims, np.int64).astype(np.int32)
    if signature or (signature is None and "shape_signature" in tensor.fields):
        tensor.fields["shape_signature"] = np.array(dims, np.int64).astype(np.int32)


def tfl_huge_dim(t, rng):
    x = _tensor(t, rng)
    if x is None:
        return False
    dims = [int(d) for d in x.fields.get("shape", [])] or [1]
    dims[rng.randrange(len(dims))] = rng.choice([2**31 - 1, 2**30, 65536 * 65536 % (2**31 - 1)])
    _set_shape(x, dims, signature=rng.random() < 0.5)
    return True


def tfl_negative_dim(t, rng):
    x = _tensor(t, rng)
    if x is None:
        return False
    dims = [int(d) for d in x.fields.get("shape", [])] or [1]
    dims[rng.randrange(len(dims))] = -rng.randint(1, 5)
    _set_shape(x, dims, signature=rng.random() < 0.5)
    return True


def tfl_rank100(t, rng):
    x = _tensor(t, rng)
    if x is None:
        return False
    _set_shape(x, [rng.choice([1, 2]) for _ in range(100)], signature=rng.random() < 0.5)
    return True


def _ops(t, rng):
    sg = _sg(t, rng)
    return sg, sg.fields.get("operators") or []


def tfl_cycle(t, rng):
    import numpy as np

    _, ops = _ops(t, rng)
    if not ops:
        return False
    i = rng.randrange(len(ops))
    j = rng.randrange(i, len(ops))
    ins, outs = ops[i].fields.get("inputs"), ops[j].fields.get("outputs")
    if ins is None or not len(ins) or outs is None or not len(outs):
        return False
    ins = np.array(ins, np.int32)
    ins[rng.randrange(len(ins))] = outs[rng.randrange(len(outs))]
    ops[i].fields["inputs"] = ins
    return True


def tfl_bad_index(t, rng):
    """Dangling tensor indices: an operator's input/output, a subgraph input/output, a
    tensor's buffer, an operator's opcode index."""
    import numpy as np

    sg = _sg(t, rng)
    bad = rng.choice([-2, -1, 10**6, 2**31 - 1, len(sg.fields.get("tensors", []))])
    where = rng.choice(["op_in", "op_out", "sg_in", "sg_out", "buffer", "opcode"])
    ops = sg.fields.get("operators") or []
    if where in ("op_in", "op_out", "opcode") and not ops:
        return False
    if where == "opcode":
        rng.choice(ops).fields["opcode_index"] = abs(bad)
        return True
    if where == "buffer":
        if not sg.fields.get("tensors"):
            return False
        rng.choice(sg.fields["tensors"]).fields["buffer"] = abs(bad)
        return True
    holder, key = {"op_in": (rng.choice(ops) if ops else None, "inputs"),
                   "op_out": (rng.choice(ops) if ops else None, "outputs"),
                   "sg_in": (sg, "inputs"), "sg_out": (sg, "outputs")}[where]
    vec = np.array(holder.fields.get(key, []), np.int32)
    if not len(vec):
        vec = np.array([bad], np.int32)
    else:
        vec[rng.randrange(len(vec))] = bad
    holder.fields[key] = vec
    return True


def tfl_duplicate_output(t, rng):
    import numpy as np

    sg, ops = _ops(t, rng)
    how = rng.choice(["sg_out", "op_out", "input"])
    if how == "sg_out":
        outs = list(sg.fields.get("outputs", []))
        if not outs:
            return False
        sg.fields["outputs"] = np.array(outs + [rng.choice(outs)], np.int32)
        return True
    if not ops:
        return False
    o = rng.choice(ops)
    outs = np.array(o.fields.get("outputs", []), np.int32)
    if not len(outs):
        return False
    if how == "op_out" and len(ops) > 1:
        other = rng.choice([p for p in ops if p is not o])
        src = other.fields.get("outputs")
        if src is None or not len(src):
            return False
        outs[0] = src[0]
    else:
        ins = sg.fields.get("inputs")
        if ins is None or not len(ins):
            return False
        outs[0] = ins[0]
    o.fields["outputs"] = outs
    return True


def tfl_buffer_data(t, rng):
    """Wrong lengths: a constant's buffer cut short, grown, or emptied."""
    import numpy as np

    bufs = [b for b in t.fields.get("buffers", []) if b.fields.get("data") is not None and len(b.fields["data"])]
    if not bufs:
        return False
    b = rng.choice(bufs)
    data = np.array(b.fields["data"], np.uint8)
    how = rng.choice(["cut", "grow", "one"])
    if how == "cut":
        data = data[:rng.randrange(len(data))]
    elif how == "grow":
        data = np.concatenate([data, np.zeros(rng.randint(1, 64), np.uint8)])
    else:
        data = data[:1]
    b.fields["data"] = data
    return True


def tfl_type(t, rng):
    x = _tensor(t, rng)
    if x is None:
        return False
    x.fields["type"] = rng.choice([-1, 3, 9, 17, 100, 127])
    return True


def tfl_options(t, rng):
    """A wild scalar in an operator's options table (an axis, a fused activation)."""
    _, ops = _ops(t, rng)
    opts = [o.fields["builtin_options"] for o in ops if o.fields.get("builtin_options") is not None]
    opts = [o for o in opts if any(isinstance(v, (int, bool)) for v in o.fields.values())]
    if not opts:
        return False
    o = rng.choice(opts)
    key = rng.choice([k for k, v in o.fields.items() if isinstance(v, (int, bool))])
    o.fields[key] = rng.choice([-1, 7, 100, 127]) if not isinstance(o.fields[key], bool) else not o.fields[key]
    return True


TFLITE_KINDS = {
    "tfl_huge_dim": tfl_huge_dim, "tfl_negative_dim": tfl_negative_dim, "tfl_rank100": tfl_rank100,
    "tfl_cycle": tfl_cycle, "tfl_bad_index": tfl_bad_index, "tfl_duplicate_output": tfl_duplicate_output,
    "tfl_buffer_data": tfl_buffer_data, "tfl_type": tfl_type, "tfl_options": tfl_options,
}

KINDS = list(BYTE_KINDS) + list(ONNX_KINDS) + list(TFLITE_KINDS)


def sources_for(kind: str) -> List[str]:
    if kind.startswith("onnx_"):
        return ONNX_SOURCES
    if kind.startswith("tfl_"):
        return TFLITE_SOURCES
    return ONNX_SOURCES + TFLITE_SOURCES


def mutate(kind: str, source: str, seed: int) -> Optional[bytes]:
    """The bytes of ``source`` mutated by ``kind``, or None where the mutation does not
    apply to this model (no initializer to break, say)."""
    rng = random.Random(f"{kind}/{source}/{seed}")
    data = (MODELS / source).read_bytes()
    if kind in BYTE_KINDS:
        return BYTE_KINDS[kind](data, rng)
    if kind in ONNX_KINDS:
        import onnx

        m = onnx.load_from_string(data)
        for _ in range(rng.choice([1, 1, 1, 2])):
            if not ONNX_KINDS[kind](m, rng):
                return None
        return m.SerializeToString()
    import tflite

    from legalizer.kinds.tflite.schema import read, serialize

    t = read(tflite.Model.GetRootAs(data, 0), "Model")
    for _ in range(rng.choice([1, 1, 1, 2])):
        if not TFLITE_KINDS[kind](t, rng):
            return None
    try:
        return serialize(t)
    except Exception:  # noqa: BLE001 - a value the flatbuffer builder itself refuses
        return None


# ---- running one case -----------------------------------------------------------------

@dataclass
class Outcome:
    code: Optional[int]  # None: killed by the time limit
    stdout: str
    stderr: str
    seconds: float
    files: List[str]
    input_unchanged: bool

    def problems(self, suffix: str) -> List[str]:
        """What breaks the contract; [] when nothing does."""
        out = []
        if self.code is None:
            out.append(f"hang: no result within {TIME_LIMIT:.0f} s")
            return out
        if self.code not in (0, 1, 2):
            out.append(f"exit status {self.code}")
        text = self.stdout + self.stderr
        for bad in ("Traceback", "internal error", "out of memory"):
            if bad in text:
                out.append(bad)
        err = self.stderr.splitlines()
        if len(err) > 1:
            out.append(f"{len(err)} stderr lines")
        if self.code == 2 and (len(err) != 1 or not err[0].startswith("legalize: error: ")):
            out.append("exit 2 without one 'legalize: error:' line")
        allowed = {f"in{suffix}"} | ({f"out{suffix}"} if self.code == 0 else set())
        extra = sorted(set(self.files) - allowed)
        if extra:
            out.append(f"files left: {extra}")
        if not self.input_unchanged:
            out.append("input modified")
        return out

    def signature(self) -> str:
        """A short name for grouping failures: the last stderr line, numbers masked."""
        import re

        line = (self.stderr.strip().splitlines() or [""])[-1]
        return re.sub(r"\d+", "N", re.sub(r"/\S+/", "", line))[:160]


def _child(argv: List[str], out_path: str, err_path: str, memory: int) -> None:  # pragma: no cover - a child
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.dup2(os.open(out_path, os.O_WRONLY), 1)
    os.dup2(os.open(err_path, os.O_WRONLY), 2)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    code = 70
    try:
        from legalizer.cli import main

        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # The status, also in a file: the fork server's own report of it is lost at
        # times under load (it then says 255).
        with open(out_path + ".rc", "w") as f:
            f.write(str(code))
        os._exit(code)


_PRELOAD = ["legalizer.cli", "legalizer.pipeline", "legalizer.kinds.onnx.importer", "legalizer.kinds.tflite.importer",
            "legalizer.numeric.ort", "legalizer.numeric.tflite", "onnxruntime", "numpy"]
_CTX = None


def _context():
    global _CTX
    if _CTX is None:
        import multiprocessing as mp

        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(_PRELOAD)
    return _CTX


def run_case(data: bytes, suffix: str, extra_args=(), memory: int = MEMORY_LIMIT,
             time_limit: float = TIME_LIMIT, subprocess_cli: bool = False) -> Outcome:
    """``legalize in<suffix> -o out<suffix> -q`` on ``data``, in a child process with
    ``memory`` bytes of address space; ``subprocess_cli`` runs ``python -m legalizer.cli``
    as a fresh process instead of a fork of the preloaded fork server."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as d:
        d = Path(d)
        src = d / f"in{suffix}"
        src.write_bytes(data)
        digest = hashlib.sha256(data).digest()
        argv = [str(src), "-o", str(d / f"out{suffix}"), "-q", *extra_args]
        out_f, err_f = tempfile.NamedTemporaryFile(prefix="fuzz-out-"), tempfile.NamedTemporaryFile(prefix="fuzz-err-")
        t0 = time.monotonic()
        if subprocess_cli:
            import subprocess

            def limit():  # pragma: no cover - in the child
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

            env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
            try:
                p = subprocess.run([sys.executable, "-m", "legalizer.cli", *argv], stdout=out_f, stderr=err_f,
                                   preexec_fn=limit, timeout=time_limit, cwd=ROOT, env=env)
                code = p.returncode
            except subprocess.TimeoutExpired:
                code = None
        else:
            proc = _context().Process(target=_child, args=(argv, out_f.name, err_f.name, memory))
            proc.start()
            proc.join(time_limit)
            if proc.is_alive():
                proc.kill()
                proc.join()
                code = None
            else:
                code = proc.exitcode
            rc = Path(out_f.name + ".rc")
            if rc.exists():
                text = rc.read_text().strip()
                code = int(text) if text and code is not None else code
                rc.unlink()
        seconds = time.monotonic() - t0
        out_f.seek(0)
        err_f.seek(0)
        stdout = out_f.read().decode("utf-8", "replace")
        stderr = err_f.read().decode("utf-8", "replace")
        out_f.close()
        err_f.close()
        files = sorted(p.name for p in d.iterdir())
        unchanged = src.exists() and hashlib.sha256(src.read_bytes()).digest() == digest
        return Outcome(code, stdout, stderr, seconds, files, unchanged)


def suffix_of(source: str) -> str:
    return Path(source).suffix


# ---- the campaign ---------------------------------------------------------------------

def _campaign_case(args: Tuple[str, str, int]) -> Tuple[str, str, int, Optional[List[str]], str, float, object]:
    kind, source, seed = args
    data = mutate(kind, source, seed)
    if data is None:
        return kind, source, seed, None, "", 0.0, None
    o = run_case(data, suffix_of(source))
    return (kind, source, seed, o.problems(suffix_of(source)), o.signature() + " | " + o.stdout[-200:], o.seconds,
            o.code)


def campaign(n: int, jobs: int, seed0: int = 0, kinds: Optional[List[str]] = None) -> int:
    from collections import Counter, defaultdict
    from concurrent.futures import ThreadPoolExecutor

    kinds = kinds or KINDS
    rng = random.Random(seed0)
    cases = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        cases.append((kind, rng.choice(sources_for(kind)), seed0 + i))
    tried, skipped, codes = Counter(), Counter(), Counter()
    failures = defaultdict(list)
    slowest = []
    t0 = time.monotonic()
    with ThreadPoolExecutor(jobs) as ex:
        for k, (kind, source, seed, problems, sig, secs, code) in enumerate(ex.map(_campaign_case, cases)):
            if problems is None:
                skipped[kind] += 1
                continue
            tried[kind] += 1
            codes[(kind, code)] += 1
            slowest.append((secs, kind, source, seed))
            for p in problems:
                failures[(p, sig.split(" | ")[0])].append((kind, source, seed))
            if (k + 1) % 200 == 0:
                print(f"... {k + 1}/{n} ({time.monotonic() - t0:.0f} s), {sum(len(v) for v in failures.values())}"
                      " failures", file=sys.stderr, flush=True)
    print(f"cases tried: {sum(tried.values())} (not applicable: {sum(skipped.values())}) in "
          f"{time.monotonic() - t0:.0f} s")
    print(f"  {'kind':24s} {'cases':>6s}  exit 0 / 1 / 2 / other")
    for kind in kinds:
        other = tried[kind] - sum(codes[(kind, c)] for c in (0, 1, 2))
        print(f"  {kind:24s} {tried[kind]:6d}  {codes[(kind, 0)]} / {codes[(kind, 1)]} / {codes[(kind, 2)]} / {other}")
    print("slowest:", sorted(slowest, reverse=True)[:5])
    for (problem, sig), where in sorted(failures.items(), key=lambda kv: -len(kv[1])):
        print(f"FAIL x{len(where)}: {problem} :: {sig} :: e.g. {where[:3]}")
    return 1 if failures else 0


if __name__ == "__main__":
    import argparse

    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", nargs="*")
    a = ap.parse_args()
    sys.exit(campaign(a.cases, a.jobs, a.seed, a.kinds))
