"""Start-up time of the ``legalize`` command, side by side with Python's own start.

Each round runs, in turn, ``python -c pass``, ``python -c 'import onnx, networkx'`` (the
floor of any run that reads a model), ``legalize --help`` and the main job on a small model (``models/mlp_bias.onnx``: with the check, with ``--no-check``, and
``--verify-only``), each a fresh process; the table gives the best and the median wall
time of each over the rounds and their excess over ``python -c pass`` measured in the
same rounds (the "Start-up" figures of docs/architecture.md), and the same for the CPU time the process
used (user + system), which a busy machine inflates far less than wall time. Run it on a
quiet machine: the wall medians of a busy one move by tens of milliseconds.

    python scripts/startup.py [--rounds 15] [--src DIR]

``--src`` is the source tree to measure (default: this one), so that two versions can be
compared with the same interpreter; its bytecode is written on a first, untimed round,
as an installed package has it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "mlp_bias.onnx"


def commands(out: Path):
    cli = [sys.executable, "-m", "legalizer.cli"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        # The floor of the main job: the libraries its work needs (the format, the IR's graph)
        "python -c 'import onnx, networkx'": [sys.executable, "-c", "import onnx, networkx"],
        "legalize --help": cli + ["--help"],
        "legalize m.onnx (checked)": cli + [str(MODEL), str(out / "a.onnx"), "--force", "-q"],
        "legalize m.onnx --no-check": cli + [str(MODEL), str(out / "b.onnx"), "--force", "--no-check", "-q"],
        "legalize m.onnx --verify-only": cli + [str(MODEL), "--verify-only", "-q"],
    }


def timed(cmd, cwd: Path, env: dict):
    """(wall seconds, CPU seconds: user + system) of one run of ``cmd``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {err.decode()[-500:]}")
    return elapsed, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--src", type=Path, default=ROOT, help="source tree whose legalizer to run")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(args.src.resolve())  # its legalizer, not an installed one
    with tempfile.TemporaryDirectory() as d:
        cmds = commands(Path(d))
        for cmd in cmds.values():  # bytecode, caches: not timed
            timed(cmd, args.src, env)
        times = {name: [] for name in cmds}
        for _ in range(args.rounds):
            for name, cmd in cmds.items():
                times[name].append(timed(cmd, args.src, env))
    base = "python -c pass"
    print(f"{args.rounds} rounds, {args.src}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for what, pick in (("best", min), ("median", statistics.median)):
        wall = {name: pick(w for w, _ in ts) for name, ts in times.items()}
        cpu = {name: pick(c for _, c in ts) for name, ts in times.items()}
        print(f"\n{what}:\n{'command':36s} {'wall':>8s} {'over python':>12s} {'CPU':>8s} {'over python':>12s}")
        for name in times:
            print(f"{name:36s} {wall[name] * 1000:5.0f} ms {(wall[name] - wall[base]) * 1000:+9.0f} ms"
                  f" {cpu[name] * 1000:5.0f} ms {(cpu[name] - cpu[base]) * 1000:+9.0f} ms")


if __name__ == "__main__":
    main()
