"""One check loop over a typed plan, in the manner of Polygraphy's
``Comparator.run(runners, data_loader)`` and ``compare_accuracy``: every check (the ONNX
check, the stored samples, the TFLite check, the PyTorch checks, ExecuTorch's,
``--against``) builds a ``Plan`` and ``run_plan`` runs it.

    Artifact      a model to run: how its runner is made, what its refusal to load means,
                  and a ``key``: artifacts of one key share one loaded runner (the
                  subgraphs of one ``.tflite``: one interpreter, each subgraph a ``part``)
    Feed          one binding to feed: its dims, its inputs (made when it is fed), where
                  its sizes came from, the stored sample it is
    Comparison    a reference and a candidate artifact, the feeds, and the policy: how
                  outputs pair (``compare.Pairing``), what a failed run is, a second
                  candidate (``also``: the TFLite check's ONNX form, judged op by op where
                  it misses), and a ``more`` hook that gives further feeds when the
                  reference rejected every one (the search for bindings)
    Plan          the comparisons, the tolerances, what the check is called before
                  anything loads, and how its result is concluded

``run_plan`` loads each artifact once per run (begun in the child ahead of the first
comparison that needs it), feeds each binding, records, compares, and lets every loaded
model go at the end; plans that share artifacts run in one ``Session`` (the ONNX check
and the PyTorch check of a ``.pt2`` load the legalized model once). A model whose child
faults (``child.RunFault``) leaves the check not run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import CheckUnavailable
from .child import RunFault, readable
from .compare import Comparator, Pairing
from .results import CheckResult
from .runner import Runner

# (error, the comparison's reference runner when it loaded first, else None) -> the check's result
Refusal = Callable[[BaseException, Optional[Runner]], Optional[CheckResult]]


class StoredRunner(Runner):
    """Reference outputs read from a file: the outputs ``names`` of the sample last
    ``select``ed (each feed's: ``stored``)."""

    def __init__(self, outputs: Sequence[Mapping[str, np.ndarray]], names: Sequence[str],
                 name: str = "stored outputs"):
        super().__init__()
        self.outputs, self.names, self.name = list(outputs), list(names), name
        self.index = 0

    def select(self, sample: int) -> None:
        self.index = sample

    def infer_impl(self, feed):
        return {n: self.outputs[self.index][n] for n in self.names}


@dataclass
class Artifact:
    """A model to run. ``make()`` gives its runner, unactivated; ``loaded(runner)`` ends
    its loading (what it raises is a refusal too). ``refused(error, reference)`` is the
    check's result when it does not load (None: the error propagates, as it does without
    ``refused``); ``reference`` is its comparison's reference runner when that loaded
    first (what ran the original names the candidate's refusal), else None. Artifacts
    with one ``key`` (not an int) are loaded once and share the runner, which is asked to
    ``select(part)`` before it runs for each (LiteRT: one interpreter runs every subgraph
    of its model); in a ``Session`` a keyed artifact stays loaded for the session's later
    plans, the others go when their plan ends. ``fed(runner, feed)`` is told each feed
    before its runner runs it (``stored``: the feed's sample)."""

    what: str  # names it ("the original", "the legalized model")
    make: Callable[[], Runner]
    key: Optional[Hashable] = None
    part: Any = None
    loaded: Optional[Callable[[Runner], None]] = None
    refused: Optional[Refusal] = None
    fed: Optional[Callable[[Runner, "Feed"], None]] = None  # (its runner, a feed) before it runs that feed


def stored(outputs: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], what: str = "") -> Artifact:
    """Stored reference outputs (``StoredRunner``, named ``what``) as a plan's artifact:
    each feed selects the outputs of the sample it is."""
    what = what or "stored outputs"
    return Artifact(what, lambda: StoredRunner(outputs, names, what),
                    fed=lambda runner, feed: runner.select(feed.sample) if feed.sample is not None else None)


@dataclass
class Feed:
    """One binding to feed: ``dims`` (reported as ``label``), its inputs made by
    ``inputs()`` when it is fed (``CheckUnavailable``: the check cannot make them,
    its message given ``prefix``), the ``source`` of its sizes and the stored ``sample``
    it is."""

    dims: Dict[str, int]
    inputs: Callable[[], Mapping[str, np.ndarray]]
    source: str = "synthesized"
    label: Optional[Dict[str, int]] = None
    sample: Optional[int] = None
    prefix: str = ""


Made = Callable[[Runner, Runner], Any]  # what is made from the loaded reference and candidate


@dataclass
class Comparison:
    """A candidate against a reference on ``feeds`` (a list, or made from the loaded
    runners). ``pairing`` and ``provider`` (what ran, as the result names it) may be
    made from the loaded runners too. ``also()`` makes a second candidate (an object
    with ``compare(feeds, expected)``, ``ready()`` and ``close()``, begun while the
    runners load). ``more(reference, errors)``: further feeds when the reference
    rejected every feed (``errors``: its words on each). ``unavailable``: what a run
    raises that leaves the check not run (``CheckResult(False, ...)`` with its words).
    ``record``: the compared runs are kept (``CheckResult.runs``). ``candidate_first``:
    the candidate loads first (its refusal is the one reported)."""

    reference: Artifact
    candidate: Artifact
    feeds: Union[Sequence[Feed], Made]
    pairing: Union[Pairing, Made, None] = None
    provider: Union[str, Made, None] = None
    refused: Optional[Callable[[BaseException], str]] = None
    reference_errors: Any = Exception
    candidate_errors: Any = Exception
    also: Optional[Callable[[], Any]] = None
    more: Optional[Callable[[Runner, List[str]], Iterable[Feed]]] = None
    unavailable: Tuple[type, ...] = (CheckUnavailable,)
    record: bool = False
    candidate_first: bool = False


@dataclass
class Plan:
    """The comparisons of one check, their tolerances, what the check is called before
    anything loads (``label``: a fault's result names it), ``conclude(result)`` (the
    verdict once every comparison ran), and ``raise_faults`` (a fault propagates:
    ``--against``)."""

    comparisons: List[Comparison]
    rtol: Any
    atol: Any
    label: str
    conclude: Callable[[CheckResult], CheckResult] = lambda result: result
    result: Callable[[], CheckResult] = None  # the result the comparisons fill (default: ran, ``label``)
    raise_faults: bool = False
    # the files the artifacts are read from: the child may read their folders, named before
    # any loads (a folder named later restarts the child, losing what it was loading)
    reads: Sequence[Any] = ()


def _made(value, ref: Runner, new: Runner):
    return value(ref, new) if callable(value) else value


class Session:
    """The artifacts of a run, each loaded once (by key) and let go at the end: one
    plan's, or those of several plans that share some (``with Session() as s:``; the
    ONNX check and the PyTorch check of a ``.pt2`` share the legalized model)."""

    def __init__(self) -> None:
        self.runners: Dict[Hashable, Runner] = {}
        self.opened: List[Any] = []
        self.done: set = set()  # the keys loaded

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def key(artifact: Artifact) -> Hashable:
        return artifact.key if artifact.key is not None else id(artifact)  # (an int: the plan's own)

    def begin(self, artifact: Artifact) -> None:
        """Start loading ``artifact`` in the child, where its runner can (``Runner.begin``)."""
        key = self.key(artifact)
        if key in self.runners:
            return
        try:
            runner = artifact.make()
        except RunFault:
            raise
        except Exception:  # noqa: BLE001 - made again, and refused, in ``load``
            return
        self.runners[key] = runner
        self.opened.append(runner)
        runner.begin()

    def load(self, artifact: Artifact, reference: Optional[Runner] = None) -> Union[Runner, CheckResult]:
        """The artifact's runner, activated (once) and given its part; or the result
        its refusal gives (``reference``: the comparison's runner loaded before it)."""
        key = self.key(artifact)
        try:
            runner = self.runners.get(key)
            if runner is None:
                runner = self.runners[key] = artifact.make()
                self.opened.append(runner)
            if key not in self.done:  # (a runtime may make its runner loaded: LiteRT's, asked which kernels)
                runner.activate()
                if artifact.loaded is not None:
                    artifact.loaded(runner)
                self.done.add(key)
        except RunFault:
            raise
        except Exception as e:  # noqa: BLE001 - the runtime's own words are the reason
            result = artifact.refused(e, reference) if artifact.refused is not None else None
            if result is None:
                raise
            return result
        if artifact.part is not None:  # (a runner in the child is asked there)
            runner.call("select", artifact.part) if hasattr(runner, "call") else runner.select(artifact.part)
        return runner

    def close(self, keep: bool = False) -> None:
        """Let every loaded model go (the child stays, warm, for the next check of the
        run); ``keep``: but those of an artifact with a ``key``, which a later plan of the
        session may share (the others would only hold the child's memory)."""
        kept = {k: r for k, r in self.runners.items() if keep and not isinstance(k, int)}
        opened = self.opened
        self.opened = [r for r in opened if any(r is k for k in kept.values())]
        self.runners, self.done = kept, {k for k in self.done if k in kept}
        for r in opened:
            if not any(r is k for k in kept.values()):
                r.deactivate() if isinstance(r, Runner) else r.close()


def run_plan(plan: Plan, session: Optional[Session] = None) -> CheckResult:
    """Run every comparison of ``plan`` into one result (above), its artifacts loaded in
    ``session`` (None: its own, closed when it ends)."""
    readable(*(p for p in plan.reads if isinstance(p, (str, os.PathLike))))
    loads = session if session is not None else Session()
    try:
        return _run(plan, loads)
    except RunFault as e:  # a model's child crashed, ran out of memory or time: not run
        loads.close()  # (what it loaded went with the child: a later plan of the session loads anew)
        if plan.raise_faults:
            raise
        return CheckResult(False, plan.label, error=str(e))
    finally:
        loads.close(keep=session is not None)


def _run(plan: Plan, loads: Session) -> CheckResult:
    result = plan.result() if plan.result is not None else CheckResult(True, plan.label)
    for k, comp in enumerate(plan.comparisons):
        first, second = (comp.candidate, comp.reference) if comp.candidate_first else (comp.reference, comp.candidate)
        for artifact in (first, second):  # the child loads both while this process goes on
            loads.begin(artifact)
        also = comp.also() if comp.also is not None else None
        if also is not None:
            loads.opened.append(also)
        got = {}
        for artifact in (first, second):
            runner = loads.load(artifact, got.get(id(comp.reference)))
            if isinstance(runner, CheckResult):
                return runner
            got[id(artifact)] = runner
        ref, new = got[id(comp.reference)], got[id(comp.candidate)]
        if also is not None:
            also.ready()
        provider = _made(comp.provider, ref, new) if k == 0 else None
        if provider is not None:
            result.provider = provider
        stopped = _compare(plan, comp, ref, new, also, result)
        if stopped is not None:
            return stopped
    return plan.conclude(result)


def _compare(plan: Plan, comp: Comparison, ref: Runner, new: Runner, also, result: CheckResult) -> Optional[CheckResult]:
    """Feed ``comp``'s bindings into ``result``; the result that stops the check, if one does."""
    comparator = Comparator(ref, new, result, plan.rtol, plan.atol, pairing=_made(comp.pairing, ref, new),
                            refused=comp.refused, reference_errors=comp.reference_errors,
                            candidate_errors=comp.candidate_errors,
                            also=also.compare if also is not None else None)
    if comp.record:
        comparator.runs = result.runs = []
    try:
        feeds = list(_made(comp.feeds, ref, new))
        errors = _feed(comparator, comp, feeds, result)
        if isinstance(errors, CheckResult):
            return errors
        if comp.more is not None and feeds and len(errors) == len(feeds):
            again = _feed(comparator, comp, list(comp.more(ref, errors)), result)
            if isinstance(again, CheckResult):
                return again
    except RunFault:
        raise
    except comp.unavailable as e:
        return CheckResult(False, result.provider, error=str(e))
    return None


def _feed(comparator: Comparator, comp: Comparison, feeds: Sequence[Feed],
          result: CheckResult) -> Union[List[str], CheckResult]:
    """Compare each feed; the reference's words on those it rejects."""
    errors = []
    for feed in feeds:
        try:
            inputs = feed.inputs()
        except RunFault:
            raise
        except CheckUnavailable as e:
            if not feed.prefix:
                raise
            return CheckResult(False, result.provider, error=f"{feed.prefix}{e}")
        for artifact, runner in ((comp.reference, comparator.reference), (comp.candidate, comparator.candidate)):
            if artifact.fed is not None:
                artifact.fed(runner, feed)
        error = comparator.binding(feed.dims, inputs, feed.source, label=feed.label, sample=feed.sample)
        if error is not None:
            errors.append(error)
    return errors
