"""Model Explorer overlays: a run's findings as node data (the JSON that
``model_explorer.node_data_builder`` builds: per graph id, per node id a value and a
colour), one file per kind, for the input model and for the legalized one.

- ``verdict``: per elementwise node the verifier's verdict (``legal``, ``violation:
  <code>``) and what the passes did (``rewritten: reshape inserted``, and in the
  legalized model ``inserted: reshape`` / ``inserted: broadcast`` / ``inserted: <op>``);
- ``constraints``: the runtime constraints each node needs;
- ``abs-error``, ``rel-error``: where a localization ran, each value's max abs / rel
  error against the reference, on the node that computes it (the culprit is the
  hottest node).

Node ids are the viewer's (``explorer_ids``); the report names nodes by label, and
the two are matched per graph.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .explorer_ids import GraphIds, NodeId, model_ids
from .kinds.base import Kind
from .kinds.registry import named as kind_named
from .oprules import builtin_rules
from .atomic_files import atomic_output, check_output_path

KINDS = ("verdict", "constraints", "abs-error", "rel-error")
COLORS = {"legal": "#b7e1b0", "violation": "#f28b82", "rewritten": "#fdd663", "inserted": "#aecbfa",
          "constraint": "#e6c9a8"}
# An inserted node is named for what it does: the ops each target inserts.
INSERTED = {"Unsqueeze": "reshape", "Reshape": "reshape", "tflite.RESHAPE": "reshape",
            "tflite.EXPAND_DIMS": "reshape", "Expand": "broadcast", "tflite.BROADCAST_TO": "broadcast"}
# Errors are coloured from white (0) to red (the largest) (Model Explorer's gradient).
GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 0.5, "bgColor": "#fdd663"}, {"stop": 1, "bgColor": "#f28b82"}]


@dataclass
class Overlay:
    """One node-data file: ``results`` per graph id, per node id (value, colour)."""

    kind: str
    name: str
    results: Dict[str, Dict[str, dict]] = field(default_factory=dict)
    numeric: bool = False

    def put(self, graph: str, node: str, value, color: Optional[str] = None) -> None:
        entry = {"value": value}
        if color is not None:
            entry["bgColor"] = color
        self.results.setdefault(graph, {})[node] = entry

    def to_json(self) -> dict:
        """As ``ModelNodeData.to_json_string`` writes it: per graph id a GraphNodeData."""
        out = {}
        for graph, results in self.results.items():
            out[graph] = {"results": results, "name": self.name, "thresholds": [],
                          "gradient": GRADIENT if self.numeric else [],
                          "hideInAggregatedStatsTable": not self.numeric, "hideInChildrenStatsTable": not self.numeric,
                          "showExpandedSummaryOnGroupNode": not self.numeric,
                          "showLabelCountColumnsInChildrenStatsTable": not self.numeric}
        return out


def _elementwise(op: str) -> bool:
    return op in builtin_rules()


def _where(graphs: Sequence[GraphIds]) -> Dict[Tuple[str, str], Tuple[GraphIds, NodeId]]:
    """(graph path, node label) -> the viewer's graph and node."""
    return {(g.path, n.label): (g, n) for g in graphs for n in g.nodes}


def _inserted_what(op: str) -> str:
    return INSERTED.get(op, op)


def _changes(before: Sequence[GraphIds], after: Sequence[GraphIds]):
    """What the passes did, read off the two files: the legalized model's nodes with no
    counterpart (inserted), and the nodes whose operands changed, with what now feeds
    them ({(path, label): [what was inserted before it]})."""
    old = _where(before)
    inserted: Dict[Tuple[str, str], str] = {}
    rewritten: Dict[Tuple[str, str], List[str]] = {}
    for g in after:
        producers = g.by_output()
        for n in g.nodes:
            key = (g.path, n.label)
            if key not in old:
                inserted[key] = _inserted_what(n.op)
        for n in g.nodes:
            key = (g.path, n.label)
            if key in old and list(old[key][1].inputs) != list(n.inputs):
                feeds = set()
                for v in n.inputs:
                    if v in old[key][1].inputs:
                        continue
                    if v in producers and (g.path, producers[v].label) in inserted:
                        feeds.add(inserted[(g.path, producers[v].label)])
                    elif v not in producers:  # a new constant: reshaped at compile time
                        feeds.add("constant")
                rewritten[key] = sorted(feeds) or ["operands changed"]
    return inserted, rewritten


def _describe(feeds: List[str]) -> str:
    words = {"reshape": "reshape inserted", "broadcast": "broadcast made explicit",
             "constant": "constant reshaped", "operands changed": "operands changed"}
    return ", ".join(words.get(f, f"{f} inserted") for f in feeds)


def build(report: Mapping, input_path: Path, kind: Optional[Kind], output_path: Optional[Path] = None,
          value_errors: Optional[Mapping[str, Tuple[float, float, str]]] = None) -> Dict[str, List[Overlay]]:
    """The overlays of one run: {"input": [...], "output": [...]} (no output overlays
    when nothing was written). ``report`` is the run's JSON report; ``value_errors``
    (max abs, max rel) per value of the legalized model, from a localization, with
    its reference's value name as ``reference`` maps it (see ``localization_errors``)."""
    before = model_ids(Path(input_path), kind)
    after = model_ids(Path(output_path), kind) if output_path is not None else []
    inserted, rewritten = _changes(before, after) if after else ({}, {})
    out: Dict[str, List[Overlay]] = {"input": [], "output": []}
    for side, graphs in (("input", before), ("output", after)):
        if not graphs:
            continue
        where = _where(graphs)
        verdict = Overlay("verdict", "legalize: verdict")
        for g in graphs:
            for n in g.nodes:
                key = (g.path, n.label)
                if side == "output" and key in inserted:
                    verdict.put(g.id, n.id, f"inserted: {inserted[key]}", COLORS["inserted"])
                elif key in rewritten:
                    verdict.put(g.id, n.id, f"rewritten: {_describe(rewritten[key])}", COLORS["rewritten"])
                elif _elementwise(n.op):
                    verdict.put(g.id, n.id, "legal", COLORS["legal"])
        for v in report.get("violations", []):
            found = where.get((v.get("graph") or "", v.get("node")))
            if found is not None and v.get("stage", "input") == side:
                verdict.put(found[0].id, found[1].id, f"violation: {v['code']}", COLORS["violation"])
        layers = [verdict]
        constraints = Overlay("constraints", "legalize: runtime constraints")
        texts: Dict[Tuple[str, str], List[str]] = {}
        for c in report.get("constraints", []):
            for label in c.get("nodes", []):
                for g in graphs:
                    if (g.path, label) in where:
                        texts.setdefault((g.path, label), []).append(c["text"])
        for key, items in texts.items():
            g, n = where[key]
            constraints.put(g.id, n.id, "; ".join(items), COLORS["constraint"])
        if constraints.results:
            layers.append(constraints)
        if value_errors:
            layers += _errors(graphs, value_errors, side)
        out[side] = layers
    return out


def _errors(graphs: Sequence[GraphIds], value_errors, side: str) -> List[Overlay]:
    """Per node, the largest error of the values it computes."""
    abs_o = Overlay("abs-error", "legalize: max abs error vs reference", numeric=True)
    rel_o = Overlay("rel-error", "legalize: max rel error vs reference", numeric=True)
    for g in graphs:
        producers = g.by_output()
        best: Dict[str, Tuple[float, float]] = {}
        for value, (a, r, ref) in value_errors.items():
            # the legalized model computes ``value``; the input model its reference
            # (or, compared with --against, ``value`` itself)
            names = (value, ref) if side == "output" else (ref, value)
            n = producers.get(names[0]) or producers.get(names[1])
            if n is None:
                continue
            old = best.get(n.id, (0.0, 0.0))
            best[n.id] = (max(old[0], a), max(old[1], r))
        for nid, (a, r) in best.items():
            abs_o.put(g.id, nid, _finite(a))
            rel_o.put(g.id, nid, _finite(r))
    return [o for o in (abs_o, rel_o) if o.results]


def _finite(x: float) -> float:
    """JSON has no infinity or NaN: the largest float stands for them."""
    return float(x) if np.isfinite(x) else float(np.finfo(np.float64).max)


def localization_errors(loc) -> Dict[str, Tuple[float, float, str]]:
    """Each matched value's (max abs err, max rel err, reference value name) from a
    ``numeric.localize.Localization``: the candidate's and the reference's values and
    their matching."""
    if loc is None:
        return {}
    cand, ref, match = loc.values
    out = {}
    for name, r_name in match.items():
        a, b = cand.get(name), ref.get(r_name)
        if a is None or b is None:
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype.kind not in "fiub" or b.dtype.kind not in "fiub" or not a.size:
            continue
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            denom = np.abs(b.astype(np.float64))
            rel = np.where(denom > 0, diff / np.where(denom > 0, denom, 1), diff)
        out[name] = (float(np.nanmax(diff)), float(np.nanmax(rel)), r_name)
    for d in loc.divergence:  # what the localization found, should values not be kept
        out.setdefault(d.value, (d.max_abs_err, d.max_rel_err, d.reference or d.value))
    return out


def report_errors(report: Mapping) -> Dict[str, Tuple[float, float, str]]:
    """The values that differ, from a report alone (``check.divergence``)."""
    return {d["value"]: (d.get("max_abs_err", 0.0), d.get("max_rel_err", 0.0), d.get("reference", d["value"]))
            for d in (report.get("check") or {}).get("divergence", [])}


# -- files ----------------------------------------------------------------------------

def paths(folder: Path, input_path: Path, output_path: Optional[Path], kinds: Sequence[str] = KINDS):
    """Where each overlay goes: ``<folder>/<model file stem>.<kind>.json``, for the
    input and the legalized model."""
    out = {}
    for side, model in (("input", input_path), ("output", output_path)):
        if model is not None:
            stem = Path(model).name.rsplit(".", 1)[0]
            out[side] = {k: Path(folder) / f"{stem}.{k}.json" for k in kinds}
    return out


def planned(folder: Path, input_path: Path, output_path: Optional[Path]) -> List[Tuple[str, Path]]:
    """The folder and every overlay file a run may write into it, as (what, path) pairs
    for ``atomic_files.check_distinct``: none may be an input or another output."""
    out = [("the overlay folder (--overlay)", Path(folder))]
    for side, files in paths(folder, input_path, output_path).items():
        model = "input model" if side == "input" else "legalized model"
        out += [(f"the {model}'s {kind} overlay (--overlay)", p) for kind, p in files.items()]
    return out


def check_folder(folder: Path, input_path: Path, output_path: Optional[Path], force: bool) -> None:
    """UsageError unless the overlays can be written (before the work)."""
    from .errors import UsageError

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: --overlay names a folder (made if missing), not a file")
    if not folder.parent.is_dir():
        raise UsageError(f"{folder.parent}: output directory does not exist")
    if folder.is_dir():
        for side in paths(folder, input_path, output_path).values():
            for p in side.values():
                check_output_path(p, force=force, protect=input_path)


def write(folder: Path, overlays: Dict[str, List[Overlay]], input_path: Path, output_path: Optional[Path], *,
          force: bool) -> List[Tuple[Path, Path, str]]:
    """Write each overlay (atomically); (model, overlay file, name) for each written."""
    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    where = paths(folder, input_path, output_path)
    written = []
    for side, model in (("input", input_path), ("output", output_path)):
        if model is None:
            continue
        for o in overlays.get(side, []):
            path = where[side][o.kind]
            with atomic_output(path, force=force, protect=input_path) as tmp:
                Path(tmp).write_text(json.dumps(o.to_json(), indent=1), encoding="utf-8")
            written.append((Path(model), path, o.name))
    return written


def for_run(folder: Path, res, input_path: Path, *, force: bool) -> List[Tuple[Path, Path, str]]:
    """Write the overlays of a finished run (``pipeline.RunResult``) into ``folder``:
    the input model's (an ONNX or TFLite file; a .pt2's is the PyTorch program, which
    is not covered) and, when it was written, the legalized model's."""
    report = res.report.to_json()
    output = Path(report["output"]) if report.get("output") else None
    # the input's kind (the report's format): its ids, and whether its input file is drawn
    # (a .pt2's graph is the PyTorch program: not)
    kind = kind_named(report.get("format"))
    if kind is None or kind.explorer_ids is None:
        return []
    drawn = kind.explorer_adapter is not None
    errors = localization_errors(getattr(res, "localization", None)) or report_errors(report)
    source = Path(input_path) if drawn else None
    if source is None and output is None:
        return []
    made = build(report, source if source is not None else output, kind, output if source is not None else None,
                 errors)
    if source is None:  # the legalized model's only
        made = {"output": made["input"]}
    return write(folder, made, source if source is not None else output, output, force=force)


def node_data(model, report, legalized=None, *, localization=None) -> Dict[str, Dict[str, dict]]:
    """The library's overlays: for ``model`` (an ONNX or TFLite file) and, if given, its
    ``legalized`` file, each kind of node data as Model Explorer reads it
    (``{"input": {"verdict": {...}, ...}, "output": {...}}``). ``report`` is the run's
    report: a ``report.Report``, its JSON dict, or the path of a ``--report`` file;
    ``localization`` a ``numeric.localize.Localization`` for every value's error (else
    the report's diverging values)."""
    from .importers.reader import sniff

    if isinstance(report, (str, Path)):
        report = json.loads(Path(report).read_text(encoding="utf-8"))
    elif hasattr(report, "to_json"):
        report = report.to_json()
    kind = kind_named(sniff(Path(model)))
    errors = localization_errors(localization) or report_errors(report)
    made = build(report, Path(model), kind, Path(legalized) if legalized is not None else None, errors)
    return {side: {o.kind: o.to_json() for o in layers} for side, layers in made.items()}
