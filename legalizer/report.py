"""The JSON report (docs/report.md): one schema for every run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from .verifier import VerifyResult

SCHEMA = 1

# The keys of one violation in the report (listed in docs/report.md): the diagnostic's
# own, "stage", "dim" (the failing dim, or null) and "graph" (the subgraph path, ""
# for the main graph).
VIOLATION_KEYS = ("code", "node", "op", "message", "operand_shapes", "result_shape", "stage", "dim", "graph")

STAT_KEYS = ("nodes_in", "nodes_out", "elementwise_nodes", "reshapes_inserted",
             "broadcasts_made_explicit", "constants_folded", "runtime_broadcast_checks",
             "runtime_broadcast_checks_elided")


# Set (to anything but "" or "0"), every report is validated against the schema before it
# is written or printed, and one that does not conform is an internal error: the tests
# set it, so that every report a test makes is held to the schema.
VALIDATE_ENV = "LEGALIZE_VALIDATE_REPORTS"


def schema_text() -> str:
    """The JSON Schema of the report (``legalizer/report.schema.json``): its definition."""
    from importlib.resources import files

    return files(__package__).joinpath("report.schema.json").read_text(encoding="utf-8")


def schema() -> dict:
    """The schema, with the ``format`` of each registered kind (``kinds.registry``; the
    file lists the built-in ones)."""
    from .kinds.registry import report_formats

    full = json.loads(schema_text())
    full["$defs"]["run"]["properties"]["format"]["enum"] = report_formats()
    return full


def validate(data) -> None:
    """``jsonschema.ValidationError`` unless ``data`` (a report, or a batch's list of
    them) conforms to the schema (the ``jsonschema`` package: the ``test`` extra)."""
    import jsonschema

    full = schema()
    if jsonschema.Draft202012Validator(full).is_valid(data):
        return
    # Not valid: the error that names the key at fault, from the definition the entry
    # is meant to meet (a run's report, or a model's that could not be processed), rather
    # than "is not valid under any of the given schemas".
    for k, entry in enumerate(data if isinstance(data, list) else [data]):
        which = "error" if isinstance(entry, dict) and "error" in entry and "check" not in entry else "run"
        one = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{which}", "$defs": full["$defs"]})
        err = jsonschema.exceptions.best_match(one.iter_errors(entry))
        if err is not None:
            where = "/".join(str(p) for p in ([k] if isinstance(data, list) else []) + list(err.absolute_path))
            raise jsonschema.ValidationError(f"the report does not conform to its schema (legalize --schema):"
                                             f" {err.message}" + (f" (at {where})" if where else ""))
    raise jsonschema.ValidationError("the report does not conform to its schema (legalize --schema)")


def checked(data):
    """``data``, validated first when ``LEGALIZE_VALIDATE_REPORTS`` is set."""
    import os

    if os.environ.get(VALIDATE_ENV, "") not in ("", "0"):
        validate(data)
    return data


def dumps(data) -> str:
    """A report (or a list of them) as the command writes and prints it (``checked``)."""
    return json.dumps(checked(data), indent=2)


def write_json(path: Path, data, protect: Optional[Path] = None) -> None:
    """Write a report (a dict, or a list of them) atomically; an existing report is
    replaced, ``protect`` (the input model) never."""
    from .atomic_files import atomic_output

    text = dumps(data) + "\n"
    with atomic_output(Path(path), force=True, protect=protect) as tmp:
        tmp.write_text(text, encoding="utf-8")


def error_report(input: Optional[str], exit_code: int, error: str) -> dict:
    """The report of a model that could not be processed (bad input, usage): what a
    pipeline reading --json or --report gets instead of nothing."""
    from .version import __version__

    return {"schema": SCHEMA, "tool_version": __version__, "input": input, "exit_code": exit_code, "error": error}


@dataclass
class Report:
    input: str
    format: str
    target: str
    profile: str
    output: Optional[str] = None
    outputs: Dict[str, str] = field(default_factory=dict)
    stats: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in STAT_KEYS})
    violations: List[dict] = field(default_factory=list)
    constraints: List[dict] = field(default_factory=list)
    check: Dict[str, Any] = field(default_factory=lambda: {"ran": False, "ok": None})
    timings_s: Dict[str, float] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    reduced: Optional[dict] = None  # --reduce: what the smallest failing subgraph is, and where (an addition)
    # The target's profile and the ops its rules refuse before and after, with reasons
    # (an addition: legalizing runs only).
    target_rules: Optional[dict] = None
    # A torch.export program: the fixes to its dynamic_shapes that make it legal, in
    # torch.export's form (``kinds.pt2.suggested_fixes.to_json``; an addition, when any).
    suggested_fixes: Optional[dict] = None

    def add_verification(self, result: VerifyResult, stage: str, graph=None) -> None:
        for d in result.violations:
            d.stage = stage
            self.violations.append(d.to_json())
        if stage == "input":
            self.stats["nodes_in"] = result.nodes
            self.stats["elementwise_nodes"] = result.elementwise_nodes
            self.set_constraints(result.constraints, graph)
        else:
            self.stats["nodes_out"] = result.nodes

    def set_constraints(self, constraints, graph=None) -> None:
        """The runtime constraints, each with the graph-input dims where the dims it names
        are declared (``"inputs": {"s0": ["x[0]"]}``): for a model exported by torch, whose
        dims carry torch's symbols or ``Dim`` names, the torch input dims it comes from."""
        self.constraints = constraints.to_json()
        declared = input_dims(graph) if graph is not None else {}
        for c, key in zip(self.constraints, constraints.items):  # (a key: its kind, then the dims it names)
            where = {name: declared[name] for name in dict.fromkeys(key[1:]) if isinstance(name, str) and name in declared}
            if where:
                c["inputs"] = where

    def to_json(self) -> dict:
        from .version import __version__

        out = {
            "schema": SCHEMA, "tool_version": __version__,
            "input": self.input, "output": self.output, "format": self.format,
            "outputs": dict(self.outputs), "target": self.target, "profile": self.profile,
            "stats": {k: int(self.stats[k]) for k in STAT_KEYS},
            "violations": [{k: v[k] for k in VIOLATION_KEYS} for v in self.violations],
            "constraints": self.constraints,
            "check": self.check, "timings_s": {k: round(float(v), 6) for k, v in self.timings_s.items()},
            "warnings": list(self.warnings),
        }
        if self.target_rules is not None:
            out["target_rules"] = self.target_rules
        if self.reduced is not None:
            out["reduced"] = self.reduced
        if self.suggested_fixes is not None:
            out["suggested_fixes"] = self.suggested_fixes
        return out

    def dumps(self) -> str:
        return dumps(self.to_json())

    def write(self, path: Path, protect: Optional[Path] = None) -> None:
        write_json(path, self.to_json(), protect)


def output_cause(violations) -> str:
    """Why a legalized model is not proved legal: operands whose rank is unknown (it
    depends on values at run time, or no inference knows their producer), broadcasting
    over the profile's rank limit that no folding can bring within it, or a legalize
    bug."""
    out = [v for v in violations if v.get("stage", "output") == "output"]
    nodes = sorted({str(v.get("node")) for v in out})
    named = ", ".join(f"'{x}'" for x in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    if out and all(v.get("code") == "unranked-operand" for v in out):
        return (f"unprovable: an operand of {named} has a rank no shape inference fixes (it depends on values"
                " at run time, or comes from an op no inference knows)")
    if out and all(v.get("code") == "rank-limit" for v in out):
        return (f"over the rank limit: the broadcasting of {named} needs more dims than the target takes (rank"
                " folding merges only adjacent dims that every operand has alike)")
    return "a legalize bug: please report it"


def verdict(rep: dict, *, legalizing: bool, unchecked: Optional[str] = None,
            arrow: str = "->", failed_where: str = "") -> Tuple[str, str]:
    """A run's verdict from its report (``Report.to_json``): ``ok``, ``bad`` or ``warn``,
    and the one line the command line ends with and the HTML page heads with.
    ``legalizing``: the run legalized (else it only verified); ``unchecked``: why a
    required check did not run; ``failed_where`` points at the failed outputs' lines."""
    n = lambda k: f"{k} violation{'s' if k != 1 else ''}"  # noqa: E731
    stages = Counter(v.get("stage") for v in rep.get("violations", []))
    chk = rep.get("check") or {"ran": False}
    if stages["input"]:
        return "bad", f"{n(stages['input'])} under '{rep.get('profile')}'" + \
            ("; not legalized, nothing written" if legalizing else "")
    if unchecked:
        return "bad", (f"the check is required (--require-check) and {unchecked}"
                       + ("; nothing written" if legalizing else ""))
    if not legalizing:
        if not chk.get("ran") and chk.get("error") is None:
            return "ok", f"legal under '{rep.get('profile')}'"
        if not chk.get("ran"):
            return "warn", f"legal under '{rep.get('profile')}' (not compared: {chk.get('error')})"
        return ("ok" if chk.get("ok") else "bad"), \
            f"legal under '{rep.get('profile')}', results {'match' if chk.get('ok') else 'DIFFER'} ({chk.get('provider')})"
    levels = [v for v in rep.get("violations", []) if v.get("code") == "tosa-level"]
    if levels:
        n_t = len(levels)
        return "bad", (f"the TOSA module is over its level: {n_t} tensor{'s' if n_t != 1 else ''} over the limits"
                       " (named above); nothing written")
    if stages["output"]:
        return "bad", (f"the legalized model has {n(stages['output'])} under '{rep.get('target')}'"
                       f" ({output_cause(rep.get('violations', []))}); nothing written")
    rules = rep.get("target_rules") or {}
    worse = worse_for_target(rules)
    if worse:
        return "bad", f"{worse}; nothing written"
    off = placement(rules)
    if off and not rules.get("allow_fallback"):
        return "bad", f"{off}; nothing written (--allow-fallback accepts a partial placement)"
    if chk.get("ran") and not chk.get("ok"):
        return "bad", f"the legalized model computes different outputs{failed_where}; nothing written"
    written = list((rep.get("outputs") or {}).values()) or ([rep["output"]] if rep.get("output") else [])
    where = f" {arrow} {', '.join(written)}" if written else ""
    torch_too = " and PyTorch" if (chk.get("torch") or {}).get("ran") else ""
    if (chk.get("executorch") or {}).get("ran"):  # a .pt2's legal program as ExecuTorch runs it
        torch_too += f", and on {chk['executorch']['provider']}"
    module = chk.get("module") or {}
    torch_too += f", and {module['provider']}" if module.get("ran") else \
        " (the TOSA module written was not run)" if module else ""
    found = (chk.get("search") or {}).get("found")
    at = f" (at dims the search found: {', '.join(f'{k}={v}' for k, v in found.items())})" if found else ""
    partly = f"; {off} (--allow-fallback)" if off else ""
    if not chk.get("ran"):
        return "warn", (f"legalized for '{rep.get('target')}'{where} (not checked: {chk.get('error') or '--no-check'})"
                        f"{partly}")
    on = "in PyTorch" if chk.get("provider") == "torch" else f"on {chk.get('provider')}"  # a .pt2 against its original
    return "ok", (f"legalized for '{rep.get('target')}'{where}, outputs match {on}{torch_too}{at}"
                  f"{partly}")


def input_dims(graph) -> Dict[str, List[str]]:
    """Each symbolic dim of ``graph``'s inputs -> where it is declared (``x[0]``)."""
    out: Dict[str, List[str]] = {}
    for node in graph.inputs:
        v = node.output
        for axis, d in enumerate(v.type.shape or ()):
            if isinstance(d, str):
                out.setdefault(d, []).append(f"{v.name}[{axis}]")
    return out


def worse_for_target(rules: dict) -> str:
    """Whether the legalized model is worse for its deployment target than the input was
    (more ops off the target's device after than before), in words; "" when it is not. No
    target's output may be: the input, as it is, is then the better model to deploy."""
    before, after = rules.get("refused_before") or [], rules.get("refused_after") or []
    if not rules.get("device") or len(after) <= len(before):
        return ""
    tool = (rules.get("profile") or {}).get("backend") or f"target '{rules.get('target')}'"
    return (f"the legalized model is worse for '{rules.get('target')}' than the input: {tool} refuses"
            f" {len(after)} of its ops, {len(before)} of the input's")


def placement(rules: dict) -> str:
    """How many ops a deployment target leaves off its device, and why in its words (the
    commonest reasons first), or "" when it takes them all (or has no device)."""
    refused = rules.get("refused_after") or []
    if not rules.get("device") or not refused:
        return ""
    reasons = Counter(r for entry in refused for r in dict.fromkeys(entry.get("reasons", ())))
    top = "; ".join(f"{why} ({k})" if len(reasons) > 1 else why for why, k in reasons.most_common(3))
    more = f"; {len(reasons) - 3} more reasons" if len(reasons) > 3 else ""
    tool = (rules.get("profile") or {}).get("backend", rules.get("target"))
    n = len(refused)
    return (f"{n} op{'s' if n != 1 else ''} of the legalized model stay{'s' if n == 1 else ''} off {rules['device']},"
            f" on the CPU ({tool}: {top}{more})")
