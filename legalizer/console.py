"""What the command line prints, shared by the single-model command (``cli``) and the
batch runners (``batch``): terminal-safe text (names in a model are untrusted), the
progress bar over a run's stages, and the printer of a run's results. rich is imported
only to draw a table or a progress bar (docs/architecture.md, "Start-up")."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .pipeline import RunResult

def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (ESC sequences, NUL, line
    and paragraph separators: any non-printable one) escaped, never printed: names in a
    model are untrusted."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def one_line(text: str) -> str:
    """``text`` as one printable line: control characters (a newline in a node name of
    a corrupt model, say) are escaped, never printed."""
    return printable(str(text).strip())


def error_lines(prefix: str, e) -> str:
    """An error as the command prints it: ``prefix`` and its message on one line, or for
    a message that quotes a tool's diagnostic (``LegalizeError.multiline``) its first line
    so, then each further line indented, every line escaped for the terminal."""
    text = str(e).strip()
    if not getattr(e, "multiline", False) or "\n" not in text:
        return one_line(f"{prefix}{text}")
    first, *rest = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return "\n".join([one_line(f"{prefix}{first}"), *(f"  {printable(ln)}" for ln in rest)])


# A model this big gets a progress indicator (stderr a terminal, no -q, no --json).
SHOW_AFTER_S = 1.0  # a run that ends sooner shows no progress at all
LARGE_FILE_BYTES = 1 << 20  # ... unless it is this large: then at once
LARGE_NODE_COUNT = 20_000


class Progress:
    """The ``on_stage`` callback of ``pipeline.run``: a transient bar on stderr over the
    run's stages, with the stage under way, its size and the time taken, shown once a
    run has gone on for over a second (a timer thread starts it), or at once for a large
    file or graph; ``close`` before printing anything."""

    LABELS = {"load": "loading", "verify": "verifying", "passes": "rewriting", "check": "checking",
              "save": "writing", "emit": "emitting", "localize": "localizing", "reduce": "reducing"}

    def __init__(self, enabled: bool, name: str, delay: float = SHOW_AFTER_S, stages: int = 2):
        self.enabled, self.name, self.delay = enabled, name, delay
        self.total = stages  # the stages the run will announce (pipeline.stages)
        self.done = -1  # stages finished: each announcement ends the one before
        self.progress = None
        self.task = None
        self.what = ""
        self.timer: Optional[threading.Timer] = None
        self.lock = threading.Lock()
        self.closed = False

    def __call__(self, stage: str, size: dict) -> None:
        if not self.enabled:
            return
        self.done = min(self.done + 1, self.total - 1)
        what = f"{self.LABELS.get(stage, stage)} {self.name}"
        if "bytes" in size:
            what += f" ({size['bytes'] / 1e6:.1f} MB)"
        if "nodes" in size:
            what += f" ({size['nodes']:,} nodes)"
        show_now = False
        with self.lock:
            self.what = one_line(what)
            if self.progress is not None:
                self.progress.update(self.task, description=self.what, completed=self.done, refresh=True)
            elif size.get("bytes", 0) >= LARGE_FILE_BYTES or size.get("nodes", 0) >= LARGE_NODE_COUNT:
                show_now = True
            elif self.timer is None:
                self.timer = threading.Timer(self.delay, self._show)
                self.timer.daemon = True
                self.timer.start()
        if show_now:
            self._show()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.closed or self.progress is not None:
                return
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                                     BarColumn(bar_width=24), MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=Console(stderr=True, highlight=False, emoji=False),
                                     transient=True)
            self.progress.start()
            self.task = self.progress.add_task(self.what, total=self.total, completed=max(self.done, 0))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
            if self.progress is not None:
                self.progress.stop()
                self.progress = None


# With -q, the violations printed before the rest are counted in one line.
QUIET_VIOLATIONS = 3


class Printer:
    def __init__(self, quiet: bool, verbose: bool, json_out: bool, legalizing: bool = False):
        self.quiet, self.verbose, self.legalizing = quiet, verbose, legalizing
        self.json_out = json_out  # with --json, stdout carries only the report

    def say(self, line: str, err: bool = False) -> None:
        """One line, as it is (callers make it printable), flushed as it is written."""
        stream = sys.stderr if err or self.json_out else sys.stdout
        stream.write(line + "\n")
        stream.flush()

    def table(self, title: str, columns, rows) -> None:
        """A table drawn by rich; ``columns`` are (header, justify), cells printable text."""
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # Text, not str: a '[' in a file name or an op name is not rich markup.
        table = Table(title=Text(title), title_justify="left")
        for header, justify in columns:
            table.add_column(header, justify=justify)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        Console(stderr=self.json_out, highlight=False, soft_wrap=True, emoji=False).print(table)

    def summary(self, res: RunResult) -> None:
        rep = res.report
        if not self.quiet:
            for w in rep.warnings:
                self.say(one_line(f"legalize: warning: {w}"), err=True)
        if self.verbose and res.model is not None:
            from .ir import format_graph
            for line in format_graph(res.model.graph).split("\n"):  # not splitlines: U+2028 is a name's
                self.say(printable(line))
        shown = rep.violations[:QUIET_VIOLATIONS] if self.quiet else rep.violations
        for v in shown:
            where = f"graph '{v['graph']}', " if v.get("graph") else ""
            where = ("in the output, " if v["stage"] == "output" else "") + where
            self.say(one_line(f"error: {where}node '{v['node']}': '{v['op']}' op {v['message']}"))
        if len(shown) < len(rep.violations):
            more = len(rep.violations) - len(shown)
            self.say(f"error: ... and {more} more violation{'s' if more != 1 else ''} (without -q: each; --report:"
                     " the list)")
        if not self.quiet and res.output_verification is None:
            self.table(one_line(f"{rep.input} ({rep.format}, profile {rep.profile})"),
                       [(h, "right") for h in ("nodes", "elementwise", "violations", "runtime constraints")],
                       [(str(rep.stats["nodes_in"]), str(rep.stats["elementwise_nodes"]),
                         str(len(rep.violations)), str(len(rep.constraints)))])
            by_code = res.input_verification.by_code() if res.input_verification else {}
            for code, count in sorted(by_code.items()):
                self.say(f"  {code}: {count}")
        if not self.quiet:
            if self.verbose:
                for c in rep.constraints:
                    where = "".join(f"; {name}: {', '.join(dims)}" for name, dims in c.get("inputs", {}).items())
                    self.say(one_line(f"  constraint: {c['text']}  (nodes: {', '.join(c['nodes'])}{where})"))
        if self.legalizing:
            self.legalize_summary(res)
        self.check_lines(res)
        self.diagnosis_lines(res)
        if rep.suggested_fixes and not self.quiet:
            self.fix_lines(rep.suggested_fixes)
        self.say(one_line(f"{rep.input}: {self.verdict(res)}"))

    def fix_lines(self, fixes: dict) -> None:
        """A torch.export program's suggested fixes, as torch.export prints its own (the
        text ``refine_dynamic_shapes_from_suggested_fixes`` takes), each dim named by its
        symbol, after a line that says which input dim each symbol is (-v: and why)."""
        where = ", ".join(f"{f['dim']} is input '{f['input']}' dim {f['axis']}" for f in fixes["fixes"])
        self.say(one_line(f"suggested fixes to the program's dynamic_shapes ({where}):"))
        for line in fixes["text"].splitlines():
            self.say(printable(line))
        if self.verbose:
            for f in fixes["fixes"]:
                self.say(printable(f"  why {f['fix']}: {f['why']}"))

    def diagnosis_lines(self, res: RunResult) -> None:
        """The culprit of a localization in one line (with -v, every value that differs),
        and what --reduce wrote."""
        loc = res.localization
        if loc is not None and (loc.culprit is not None or not self.quiet):
            self.say(one_line(loc.line()))
            if self.verbose:
                for d in loc.divergence[1:]:
                    self.say(printable(f"  then: {d.where()}: {d.error()}"))
        if res.reduced is not None:
            r = res.reduced
            files = ", ".join(r.files.values())
            self.say(one_line(f"reduced: {len(r.nodes)} node{'s' if len(r.nodes) != 1 else ''} "
                              f"({', '.join(r.nodes[:8])}{', ...' if len(r.nodes) > 8 else ''}) still "
                              f"show{'s' if len(r.nodes) == 1 else ''}: "
                              f"{r.what} ({r.tests} subgraphs tried) -> {files}"))

    def verdict(self, res: RunResult) -> str:
        from .report import verdict  # (report imports the verifier: not for --help)

        return verdict(res.report.to_json(), legalizing=self.legalizing, unchecked=res.unchecked,
                       failed_where=" (FAILED above)")[1]

    def legalize_summary(self, res: RunResult) -> None:
        """The main job's table: ops before and after, what was inserted, the check."""
        rep = res.report
        if not self.quiet and res.output_verification is not None:
            st = rep.stats
            rows = [("nodes", str(st["nodes_in"]), str(st["nodes_out"]))]
            for op in sorted(set(res.ops_before) | set(res.ops_after)):
                if res.ops_before[op] != res.ops_after[op]:
                    rows.append((printable(f"  {op}"), str(res.ops_before[op]), str(res.ops_after[op])))
            n_in = sum(1 for v in rep.violations if v["stage"] == "input")
            n_out = sum(1 for v in rep.violations if v["stage"] == "output")
            rows.append(("violations", f"{n_in} ({rep.profile})", f"{n_out} ({rep.target})"))
            rules = rep.target_rules or {}
            if rules.get("device"):  # what the target's device would not take, before and after
                rows.append((printable(f"off {rules['device']}"), str(len(rules["refused_before"])),
                             str(len(rules["refused_after"]))))
            self.table(one_line(f"{rep.input} ({rep.format}) -> target {rep.target}"),
                       [("", "left"), ("before", "right"), ("after", "right")], rows)
            line = (f"reshapes inserted: {st['reshapes_inserted']}, constants folded: {st['constants_folded']}, "
                    f"runtime constraints: {len(rep.constraints)}")
            from .targets import TARGETS

            spec = TARGETS.get(rep.target)
            if spec is not None and spec.explicit_broadcasts:
                line = (f"broadcasts made explicit: {st['broadcasts_made_explicit']}, runtime broadcast checks: "
                        f"{st['runtime_broadcast_checks']} (elided: {st['runtime_broadcast_checks_elided']}), " + line)
            self.say(line)
            lowered = (rep.target_rules or {}).get("ranks_lowered")
            if lowered:
                self.say(f"ATen ops lowered: {lowered.get('aten_ops_lowered', 0)}, permutes split into block swaps:"
                         f" {lowered.get('aten_block_swaps', 0)}, broadcasts made explicit:"
                         f" {lowered.get('aten_broadcasts_made_explicit', 0)}")

    def check_lines(self, res: RunResult) -> None:
        """One line per compared output and binding, in the manner of Polygraphy."""
        # A PyTorch input is compared twice: with its ONNX export, and with PyTorch.
        for chk, ref, who in ((res.check, "", "the original model"),
                              (getattr(res.check, "torch", None), "vs torch | ", "PyTorch"),
                              (getattr(res.check, "module", None), "tosa module | ", "the original model"),
                              (getattr(res.check, "executorch", None), "executorch | ", "the original program")):
            searched = getattr(chk, "search", None)
            if searched is not None and not self.quiet:
                self.say(one_line(f"search: {who} rejects every synthesized dim binding; {searched.summary()}"))
            if chk is None or not chk.ran:
                continue
            skipped = [b for b in chk.bindings if b.skipped]
            across = getattr(chk, "samples", None)
            for b in chk.bindings:
                dims = ", ".join(f"{k}={v}" for k, v in b.dims.items()) or "static shapes"
                if getattr(b, "sample", None) is not None:
                    dims = f"sample {b.sample} ({dims})"
                if b.skipped:
                    if self.verbose:
                        self.say(one_line(f"SKIPPED | {ref}{dims} | {b.skipped}"))
                    continue
                for o in b.outputs:
                    # with several samples, their summary below stands for the passing ones
                    if (self.quiet or (across and not self.verbose)) and o.ok:
                        continue
                    status = "PASSED" if o.ok else "FAILED"
                    detail = o.detail or f"max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}"
                    self.say(one_line(f"{status} | {ref}Output: '{o.name}' | {dims} | {detail}"))
                    if self.verbose and o.stats and "mean_abs_err" in o.stats:
                        self.say(printable(f"  {stats_line(o.stats)}"))
            if skipped and not self.verbose and not self.quiet:
                self.say(f"{len(skipped)} of {len(chk.bindings)} dim bindings skipped: {who}"
                               " rejects them (-v shows why)")
            for entry in (across or {}).get("outputs", []):
                if self.quiet and not entry["failed"]:
                    continue
                self.say(one_line(across_line(entry, across["count"])))
                if self.verbose and "histogram" in entry:
                    self.say(printable(f"  {histogram_line(entry['histogram'])}"))


def across_line(entry: dict, count: int) -> str:
    """One output's errors across several samples (``numeric.samples.across``)."""
    status = "FAILED" if entry["failed"] else "PASSED"
    spread = entry["max_abs_err_per_sample"]
    line = (f"{status} | Output: '{entry['name']}' | {count} samples, {len(entry['failed'])} failed | max abs err"
            f" {entry['max_abs_err']:.3g} (sample {entry['worst_sample']}), max rel err {entry['max_rel_err']:.3g};"
            f" per-sample max abs err p50 {spread['p50']:.3g}, p90 {spread['p90']:.3g}")
    if "total" in entry:
        line += (f"; mean abs err {entry['mean_abs_err']:.3g}, {entry['mismatched']} of {entry['total']} elements"
                 " outside the tolerances")
    return line


def histogram_line(histogram: dict) -> str:
    """The nonempty decades of an error histogram: ``<=1e-09: 20, (1e-06, 1e-05]: 4``."""
    edges, counts = histogram["edges"], histogram["counts"]
    parts = []
    for k, c in enumerate(counts):
        if not c:
            continue
        where = f"<={edges[0]:.0e}" if k == 0 else f">{edges[-1]:.0e}" if k == len(edges) else \
            f"({edges[k - 1]:.0e}, {edges[k]:.0e}]"
        parts.append(f"{where}: {c}")
    return "abs err histogram: " + ", ".join(parts)


def stats_line(stats: dict) -> str:
    """An output's error statistics in one line (-v)."""
    return (f"abs err: mean {stats['mean_abs_err']:.3g}, p50 {stats['p50_abs_err']:.3g}, "
            f"p90 {stats['p90_abs_err']:.3g}, p99 {stats['p99_abs_err']:.3g}; {stats['mismatched']} of "
            f"{stats['total']} elements outside the tolerances")
