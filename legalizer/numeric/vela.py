"""Compile an int8 .tflite with Arm's Vela (PyPI ``ethos-u-vela``, pinned 5.2.0: the ``vela``
extra) and read back what it decided: which ops it placed on the Ethos-U NPU, which it
left on the CPU and why, and its cycle estimate.

    compile_tflite(path, core="default")  -> VelaResult
    compile_tflite(path, core="legacy")   -> VelaResult  (U55/U65, ``--debug-force-legacy-core``)

Vela has two compilers. The default one (Regor) takes the U85 and places ops of any rank,
decomposing the ones over 4-D. The deprecated Python core (``--debug-force-legacy-core``)
only takes the U55 and U65, and refuses tensors over 4-D, a batch other than 1,
broadcasting on both operands and non-constant shapes. Both are run as a child process
(Vela prints its decisions and writes CSVs; a crash in it must not take the caller down).

Where each core says why an op stays on the CPU:
- default: ``Warning (supported operators) operator: ADD, ofm: 'y'`` then ``Reason: ...``
  lines, and the per-layer CSV's ``Target`` column (``NPU``/``CPU``) for every op;
- legacy: ``Warning: Unsupported TensorFlow Lite semantics for ADD 'y'. Placing on CPU
  instead`` then `` - reason`` lines, ``Info: BROADCAST_TO 'bc' is a CPU only op``, and a
  per-layer CSV listing only the NPU's ops.
The cycle estimate is the summary CSV's ``cycles_total``; the per-layer CSV's ``Op
Cycles`` split it by op.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..errors import CheckUnavailable
from ..extras import install_hint

VELA_VERSION = "5.2.0"
INSTALL_HINT = f"install the vela extra: {install_hint('vela')}"
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Core:
    """One of Vela's compilers, on the accelerator it is run for."""

    name: str
    accelerator: str
    flags: Tuple[str, ...] = ()


CORES: Dict[str, Core] = {
    "default": Core("default", "ethos-u85-256"),
    # The legacy core refuses the U85 ("only supports Ethos-U55 and Ethos-U65").
    "legacy": Core("legacy", "ethos-u55-128", ("--debug-force-legacy-core",)),
}


@dataclass(frozen=True)
class Placement:
    """Vela's decision for one op, named by its output tensor (Vela's own key)."""

    op: str  # the TFLite operator as Vela names it: ``ADD``, ``BROADCAST_TO`` (upper case)
    name: str  # the op's first output tensor
    target: str  # "NPU" or "CPU"
    cycles: float = 0.0
    reasons: Tuple[str, ...] = ()  # Vela's words, for a CPU op


@dataclass
class VelaResult:
    core: str
    accelerator: str
    npu_ops: int
    cpu_ops: int
    cycles_total: float
    placements: List[Placement] = field(default_factory=list)
    log: str = ""

    def cpu_placements(self) -> List[Placement]:
        return [p for p in self.placements if p.target == "CPU"]

    def refused(self) -> Dict[str, Tuple[str, ...]]:
        """{output tensor name: Vela's reasons} of the ops left on the CPU."""
        return {p.name: p.reasons for p in self.cpu_placements()}


class VelaError(RuntimeError):
    """Vela rejected the model or failed; the message is one line."""


def vela_available() -> bool:
    try:
        _check_installed()
    except CheckUnavailable:
        return False
    return True


def _check_installed() -> None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        have = version("ethos-u-vela")
    except PackageNotFoundError:
        raise CheckUnavailable(f"the Ethos-U check needs ethos-u-vela=={VELA_VERSION} ({INSTALL_HINT})") from None
    if have != VELA_VERSION:
        # Reasons, CSV columns and cycle models move between releases.
        raise CheckUnavailable(f"the Ethos-U check needs ethos-u-vela=={VELA_VERSION}, not {have} ({INSTALL_HINT})")


_RUN_VELA = "import sys; from ethosu.vela.vela import main; sys.exit(main())"


def compile_tflite(path: str, core: str = "default", *, timeout: float = TIMEOUT_S,
                   extra_args: Tuple[str, ...] = ()) -> VelaResult:
    """Run Vela on ``path`` with ``core`` (a key of ``CORES``) and parse its decisions."""
    _check_installed()
    c = CORES[core]
    with tempfile.TemporaryDirectory(prefix="legalize-vela-") as out:
        args = [sys.executable, "-c", _RUN_VELA, os.fspath(path), "--accelerator-config", c.accelerator,
                *c.flags, "--output-dir", out, "--verbose-performance", *extra_args]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise VelaError(f"vela timed out after {timeout:g} s on {path}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise VelaError(f"vela failed on {path}: {_last_error(log, proc.returncode)}")
        stem = os.path.splitext(os.path.basename(path))[0]
        layers = _read_csv(os.path.join(out, f"{stem}_per-layer.csv"))
        summary = _read_csv(_one(glob.glob(os.path.join(out, f"{stem}_summary_*.csv")), out))
    npu, cpu = _op_counts(log)
    cycles = float(summary[0]["cycles_total"]) if summary else 0.0
    return VelaResult(c.name, c.accelerator, npu, cpu, cycles, _placements(layers, log, _ops_by_output(path)), log)


def _ops_by_output(path: str) -> Dict[str, str]:
    """{first output tensor name: builtin op name} of subgraph 0: the default core names
    some refused ops ``None`` (BROADCAST_TO), the file says what they are."""
    import tflite  # the importer's dependency; Vela's file is the same flatbuffer

    from ..kinds.tflite.schema import builtin_name
    with open(path, "rb") as f:
        buf = f.read()
    m = tflite.Model.GetRootAsModel(buf, 0)
    g = m.Subgraphs(0)
    out: Dict[str, str] = {}
    for i in range(g.OperatorsLength()):
        o = g.Operators(i)
        code = m.OperatorCodes(o.OpcodeIndex())
        name = builtin_name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())) or "CUSTOM"
        if o.OutputsLength():
            out[g.Tensors(o.Outputs(0)).Name().decode("utf-8", "replace")] = name
    return out


def _one(paths: List[str], out: str) -> str:
    if len(paths) != 1:
        raise VelaError(f"vela wrote {len(paths)} summary CSVs in {out}, expected 1")
    return paths[0]


def _read_csv(path: str) -> List[Dict[str, str]]:
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        # One table per NPU subgraph, each under its own header row.
        return [row for row in csv.DictReader(f) if any(k != v for k, v in row.items())]


def _last_error(log: str, rc: int) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [f"exit status {rc}"])[-1]


_COUNT = re.compile(r"^(CPU|NPU) operators = (\d+)", re.M)


def _op_counts(log: str) -> Tuple[int, int]:
    counts = {k: int(v) for k, v in _COUNT.findall(log)}
    return counts.get("NPU", 0), counts.get("CPU", 0)


# default core: "Warning (supported operators) operator: ADD, ofm: 'y'" + "Reason: ..." lines
_REGOR_WARN = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'$")
# legacy core: "Warning: Unsupported TensorFlow Lite semantics for ADD 'y'. Placing on CPU instead"
# (or "Warning: ADD 'y' is not supported on the NPU. Placing on CPU instead") + " - ..." lines
_LEGACY_WARN = re.compile(r"^Warning: (?:Unsupported TensorFlow Lite semantics for )?(\w+) '(.*?)'[ .].*Placing on CPU")
_LEGACY_CPU_ONLY = re.compile(r"^Info: (\w+) '(.*)' is a CPU only op")


def _reasons(log: str) -> Dict[str, Tuple[str, Tuple[str, ...]]]:
    """{ofm name: (op, reasons)} from either core's warnings."""
    found: Dict[str, Tuple[str, List[str]]] = {}
    current: Optional[List[str]] = None
    for line in log.splitlines():
        m = _REGOR_WARN.match(line) or _LEGACY_WARN.match(line)
        if m:
            current = found.setdefault(m.group(2), (m.group(1), []))[1]
            continue
        m = _LEGACY_CPU_ONLY.match(line)
        if m:
            found.setdefault(m.group(2), (m.group(1), []))[1].append("CPU only op")
            current = None
            continue
        if current is not None:
            text = line.strip()
            if text.startswith("Reason: "):
                current.append(text[len("Reason: "):])
            elif text.startswith("- "):
                current.append(text[2:])
            elif text and line.startswith("   "):
                current.append(text)  # the legacy core's detail line under a reason
            else:
                current = None
    return {k: (op, tuple(r)) for k, (op, r) in found.items()}


def _placements(layers: List[Dict[str, str]], log: str, ops: Dict[str, str]) -> List[Placement]:
    reasons = _reasons(log)
    out: List[Placement] = []
    seen = set()
    for row in layers:
        name = row.get("Name", "")
        op = row.get("Original Operator") or row.get("TFLite_operator") or ""
        target = row.get("Target", "NPU")  # the legacy core's CSV lists only the NPU's ops
        cycles = float(row.get("Op Cycles") or 0.0)
        why = reasons.get(name, ("", ()))[1] if target == "CPU" else ()
        if op in ("", "None"):  # the default core names some refused ops None (BROADCAST_TO)
            op = ops.get(name, op)
        out.append(Placement(op.upper(), name, target, cycles, why))
        seen.add(name)
    for name, (op, why) in reasons.items():
        if name not in seen:
            out.append(Placement(ops.get(name, op).upper(), name, "CPU", 0.0, why))
    return out
