"""Numeric check on onnxruntime: run the original and the legalized model on the same
inputs, for each binding of the dynamic input dims, and compare every output.

Inputs are synthesized per dtype with a fixed seed (or given). Dynamic dims get a
small size and 1 (where the original accepts 1, so runtime broadcasting runs); with
several dynamic dims, every combination up to ``max_bindings``, then a seeded sample.
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx

from ..errors import CheckUnavailable, UsageError, first_line
# (compare, BindingResult, OutputResult: the check's public names, kept importable from here)
from .compare import ATOL, RTOL, Pairing, compare, unless_compared  # noqa: F401
from .settings import CheckSettings, settings_of
from .user_inputs import Declared, as_arrays, declared_shapes, dim_keys, user_dims  # noqa: F401 - declared_shapes: importable from here too
from .inputs import SMALL, InputSpec, make_feeds
from .results import BindingResult, CheckResult, OutputResult  # noqa: F401
from .ort_session import OrtRunner, providers, session  # noqa: F401 - OrtRunner: importable from here too
from .plan import Artifact, Comparison, Feed, Plan, Session, run_plan
from .runner import Runner
from .runtimes import ONNX, runner_for
from .runtime_shapes import verify_run_time
from .search import PROBE_MEMORY, TooBig, graph_sizes, search, sizes_in_name


# -- inputs ---------------------------------------------------------------------------

def _dims_of(model: onnx.ModelProto) -> List[Tuple[str, str, int]]:
    """(input name, dim key, axis) for every dynamic dim of the graph inputs."""
    return [(name, d, k) for name, shape in declared_shapes(model) for k, d in enumerate(shape or [])
            if isinstance(d, str)]


def choices_from_constraints(constraints) -> Dict[str, List[int]]:
    """Sizes a dynamic dim may take, read off the verifier's runtime constraints (its
    ``shapes.Constraint`` values, or a ``ConstraintSet``): ``x[0] == 2 or x[0] == 1``
    gives 2 or 1; ``N == 4``, 4. A dim's key is its symbol or ``input[axis]``, the same
    as the constraints name it."""
    out: Dict[str, List[int]] = {}
    for c in constraints:
        kind, dim, other = c.key
        if kind == "bcast" and isinstance(other, int):
            out[dim] = [other, 1]
        elif kind == "eq" and isinstance(other, str) and other.isdigit():
            out[dim] = [int(other)]
    return out


def _options(key: str, not_one: bool, choices: Optional[Mapping[str, List[int]]]) -> List[int]:
    """The sizes the check runs a free dynamic dim at: its ``choices``, else {SMALL, 1}
    (just SMALL with ``not_one``, strict symbolic mode, where no dynamic dim is 1)."""
    return list((choices or {}).get(key, [SMALL] if not_one else [SMALL, 1]))


def bindings_for(model: onnx.ModelProto, fixed: Mapping[str, int], max_bindings: int = 8,
                 seed: int = 0, not_one: bool = False,
                 choices: Optional[Mapping[str, List[int]]] = None) -> List[Dict[str, int]]:
    """Dim bindings to run: every combination of each free dynamic dim's ``_options``
    up to ``max_bindings``, then a seeded sample that keeps the first and the last
    combination (all large, all small)."""
    keys = sorted({key for _, key, _ in _dims_of(model)} - set(fixed))
    if not keys:
        return [dict(fixed)]
    options = [_options(k, not_one, choices) for k in keys]
    total = 1
    for o in options:
        total *= len(o)
    if total <= max_bindings:
        combos = list(itertools.product(*options))
    else:
        rng = random.Random(seed)
        sample = {tuple(o[0] for o in options), tuple(o[-1] for o in options)}
        while len(sample) < max_bindings:
            sample.add(tuple(rng.choice(o) for o in options))
        combos = sorted(sample, reverse=True)
    return [dict(fixed, **dict(zip(keys, c))) for c in combos]


def input_specs(model: onnx.ModelProto) -> List[InputSpec]:
    """The specs of the fed graph inputs, dims keyed as ``declared_shapes`` keys them;
    an input that is not a tensor cannot be made (only given)."""
    inits = {t.name for t in model.graph.initializer}
    out: List[InputSpec] = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            kind = (vi.type.WhichOneof("value") or "untyped").replace("_type", "")
            out.append(InputSpec(vi.name, 0, (), unavailable=f"input '{vi.name}' is a {kind}, and the check makes"
                                                              " tensor inputs only"))
            continue
        # an unranked input is made a scalar
        out.append(InputSpec(vi.name, vi.type.tensor_type.elem_type, tuple(dim_keys(vi))))
    return out


def synthesize(model: onnx.ModelProto, dims: Mapping[str, int], given: Mapping[str, np.ndarray],
               seed: int = 0) -> Dict[str, np.ndarray]:
    """The check's inputs for ``model`` at ``dims`` (``inputs.make_feeds``)."""
    return make_feeds(input_specs(model), dims, given, seed)


def check(original, legalized, settings: Optional[CheckSettings] = None, *, dims: Optional[Mapping[str, int]] = None,
          inputs=None, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
          declared: Optional[onnx.ModelProto] = None, choices: Optional[Mapping[str, List[int]]] = None,
          hints: Optional[Mapping[str, Sequence[int]]] = None, max_search_tries: Optional[int] = None,
          profile: Optional[str] = None, raise_faults: bool = False, session: Optional[Session] = None,
          **changes) -> CheckResult:
    """Run both models (ModelProtos or paths) for each dim binding and compare their
    outputs. ``declared`` is the original's proto, for its input declarations, when
    ``original`` is a path (its weights are not needed for that). ``inputs`` (arrays by
    input name, or an ``.npz`` path) and ``input_shapes`` bind the dims of their inputs,
    as ``dims`` does (UsageError when they do not fit the model). When the original
    rejects every synthesized binding, the bindings are searched for (``search.py``;
    ``hints``: per dim, sizes to try first, e.g. its range's bounds). With ``profile``
    the legalized model's run-time shapes are verified under it (``runtime_shapes``).
    ``settings`` (``CheckSettings``; ``changes``: its fields by keyword) say where it
    runs and what agrees; with its ``record`` the result keeps what each compared binding
    fed and got (``CheckResult.runs``, for --save-inputs / --save-outputs). A model whose
    child process faults (``child.RunFault``) leaves the check not run
    (``raise_faults``: raised, for ``--against``). The check is a ``plan.Plan`` run by
    ``plan.run_plan``, in ``session`` when given (the legalized model loaded once for it and
    the checks that follow it there: ``torch_ref.check_torch``)."""
    settings = settings_of(settings, **changes)
    runtime = runner_for(ONNX, settings.provider)
    used = runtime.names(settings.provider)  # (UsageError for a provider onnxruntime does not have)
    if runtime.tolerance is not None and (settings.rtol, settings.atol) == (RTOL, ATOL):  # none given
        settings = settings_of(settings, rtol=runtime.tolerance[0], atol=runtime.tolerance[1])
    declared = declarations(original, declared)
    given = as_arrays(inputs)
    fixed = user_dims(declared_shapes(declared), dims, input_shapes, given)
    return run_plan(_plan(original, legalized, declared, given, fixed, runtime, used, settings, choices=choices,
                          hints=hints, max_search_tries=max_search_tries, profile=profile, raise_faults=raise_faults),
                    session)


def runner(model, provider: str, what: str, basic: bool = False) -> Runner:
    """An ONNX model (a ModelProto or a path) on the runtime that runs ONNX on
    ``provider`` (``runtimes.py``), in the child process; ``what`` names it when it is
    not a path ("the original")."""
    return runner_for(ONNX, provider).runner(model, provider, what=what, basic=basic)


def declarations(original, declared: Optional[onnx.ModelProto] = None) -> onnx.ModelProto:
    """``declared``, or the original's declarations (its proto, or the file read
    without its external data)."""
    if declared is not None:
        return declared
    return original if isinstance(original, onnx.ModelProto) else \
        onnx.load_model(str(original), load_external_data=False)


def artifact(runtime, model, provider: str, what: str, ran: bool, label: Callable[[Optional[Runner]], str],
             loaded: Optional[Callable[[Runner], None]] = None, make: Optional[Callable[[], Runner]] = None) -> Artifact:
    """``model`` on ``runtime`` as a plan's artifact: when it does not load, the
    CheckResult (``ran``, ``label(reference)``: the reference's runner when it loaded
    first) that says ``what`` does not load there, in its words (a UsageError of
    ``loaded``, the provider's confirmation, propagates)."""
    def refused(e: BaseException, reference: Optional[Runner]) -> Optional[CheckResult]:
        if isinstance(e, UsageError):
            return None
        return CheckResult(ran, label(reference), error=f"{what} does not load on {runtime.name}: {first_line(e)}")

    return Artifact(what, make or (lambda: runtime.runner(model, provider, what=what)), loaded=loaded,
                    refused=refused)


def model_key(model, provider: str) -> tuple:
    """What an ONNX model loaded on ``provider`` is shared under in a ``plan.Session``:
    its file, or the proto itself."""
    return ("onnx", provider, os.path.abspath(model) if isinstance(model, (str, os.PathLike)) else id(model))


def pair(original, legalized, provider: str, runtime) -> Tuple[Artifact, Artifact]:
    """The original and the legalized model on ``runtime`` (the original on its own
    runtime where ``runtime`` names one), each confirmed to run where asked."""
    on = runtime.original or provider  # the original's provider: the reference's
    home = runner_for(ONNX, on) if runtime.original else runtime
    ref = artifact(home, original, on, "the original", False, lambda reference: runtime.names(provider),
                   loaded=lambda r: home.started(on, r))
    # (the original loads first: what ran it names the legalized model's refusal)
    new = artifact(runtime, legalized, provider, "the legalized model", True,
                   lambda reference: runtime.names(provider) if runtime.original else reference.provider,
                   loaded=(lambda r: runtime.started(provider, r)) if runtime.original else None)
    new.key = model_key(legalized, provider)
    return ref, new


def _plan(original, legalized, declared, given, fixed, runtime, used: str, settings: CheckSettings, *, choices, hints,
          max_search_tries, profile, raise_faults) -> Plan:
    specs = input_specs(declared)
    seed, not_one, max_bindings = settings.seed, settings.not_one, settings.max_bindings

    def feeds_of(binding: Dict[str, int]) -> Dict[str, np.ndarray]:
        return make_feeds(specs, binding, given, seed)

    def feed(binding: Dict[str, int], source: str) -> Feed:
        return Feed(binding, lambda: feeds_of(binding), source)

    free = _free_keys(declared, fixed)
    plan = bindings_for(declared, fixed, max_bindings, seed, not_one, choices)
    searched: List = []

    def more(ref: Runner, errors: List[str]) -> List[Feed]:
        """When the original rejects every synthesized binding: bindings it accepts, searched for."""
        if not free:
            return []

        def run_original(binding: Dict[str, int]):
            try:
                feeds = feeds_of(binding)
            except CheckUnavailable:
                raise TooBig from None
            # (its outputs stay in the child; the search's ceiling bounds the child's memory)
            return ref.attempt(feeds, memory=PROBE_MEMORY)

        all_hints = {k: [*(hints or {}).get(k, ()), *sizes_in_name(k)] for k in free}
        found = search(free, plan[0], run_original, errors=errors, hints=all_hints, constants=graph_sizes(declared),
                       tried=plan, max_tries=max_search_tries)
        searched.append(found)
        if found.found is None:
            return []
        found.choices = {k: _with_found(_options(k, not_one, choices), found.found[k], plan[0][k]) for k in free}
        again = bindings_for(declared, fixed, max_bindings, seed, not_one, found.choices)
        # no binding the original rejected again
        return [feed(b, "search") for b in again if not found.knows_rejected(b)]

    def conclude(result: CheckResult) -> CheckResult:
        result.search = searched[0] if searched else None
        first = next((b for b in result.bindings if not b.skipped), None)
        if profile is not None and first is not None:
            result.runtime = verify_run_time(legalized, feeds_of(first.dims), first.dims, profile,
                                             providers(settings.provider))
        tried = f"; a search of {result.search.tried} more found none it accepts" if result.search else ""
        return unless_compared(result, f"the original model fails on onnxruntime for every input binding tried"
                                       f" ({len(plan)} synthesized{tried}): ")

    ref, new = pair(original, legalized, settings.provider, runtime)
    source = source_of(declared, fixed)
    # outputs by position: the legalized model keeps the original's order
    compared = Comparison(ref, new, [feed(b, source) for b in plan], Pairing(by_position=True),
                          provider=lambda ref, new: new.provider, more=more, record=settings.record)
    return Plan([compared], settings.rtol, settings.atol, used, conclude, raise_faults=raise_faults,
                reads=(original, legalized))


def source_of(declared: onnx.ModelProto, fixed: Mapping[str, int], searched: bool = False) -> str:
    """A binding's ``source``: "search" (its sizes were searched for), "user" (every
    dynamic dim bound by the user) or "synthesized"."""
    if searched:
        return "search"
    return "user" if fixed and not _free_keys(declared, fixed) else "synthesized"


def _free_keys(declared: onnx.ModelProto, fixed: Mapping[str, int]) -> List[str]:
    """The dynamic dims not bound by the user, in the order the search grows them: the
    last axes first (a leading dim is usually a batch, which any size fits)."""
    axis: Dict[str, int] = {}
    for _, key, k in _dims_of(declared):
        if key not in fixed:
            axis[key] = max(axis.get(key, k), k)
    return sorted(axis, key=lambda key: -axis[key])


def _with_found(options: List[int], found: int, base: int) -> List[int]:
    """A dim's sizes after the search: the size found where it changed the dim (and 1,
    when the check would try 1 anyway), else the dim's own."""
    if found == base:
        return options
    return [found] + ([1] if 1 in options and found != 1 else [])
