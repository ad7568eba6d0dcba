"""Run a command and report its exit status, wall time and the peak RSS of its whole
process tree (the command and every descendant, summed at each sample).

    python scripts/tree_peak.py [--json] [--interval S] -- COMMAND [ARGS...]

GNU time's "maximum resident set size" is one process's peak, not the tree's: a run whose
parent and child each hold 2 GB reports 2 GB there. This samples /proc every interval
(default 5 ms) instead, so a peak shorter than that can be missed; the figure is a lower
bound, good to a few percent for runs of a second or more. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _children() -> dict[int, list[int]]:
    """Each live pid's children, read from /proc/PID/stat."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def _rss(pid: int) -> int:
    """A process's resident set size in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(root: int) -> int:
    """The summed RSS of ``root`` and all its descendants now."""
    tree, total, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss(pid)
        todo.extend(tree.get(pid, ()))
    return total


def measure(command: list[str], interval: float = 0.005) -> dict:
    """Run ``command`` to its end: {'rc', 'wall_s', 'peak_rss_mb'}."""
    start = time.perf_counter()
    proc = subprocess.Popen(command)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(interval)
    return {
        "rc": proc.returncode,
        "wall_s": round(time.perf_counter() - start, 2),
        "peak_rss_mb": round(peak / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--interval", type=float, default=0.005)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    result = measure(command, args.interval)
    if args.json:
        print(json.dumps(result), file=sys.stderr)
    else:
        print(
            f"exit {result['rc']}, {result['wall_s']} s, tree peak RSS {result['peak_rss_mb']} MB",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
