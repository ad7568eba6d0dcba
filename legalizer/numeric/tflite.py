"""The numeric check of a TFLite model: the original on LiteRT is the reference; the
legalized ``.tflite`` on LiteRT and the legalized model's ONNX form on onnxruntime
must both agree with it, per subgraph and per binding of the dynamic input dims.

Floats agree within the tolerances (on onnxruntime, relative to the output's largest
magnitude: other kernels sum in another order); a quantized output within one
quantization step (LiteRT's integer kernels and onnxruntime's float-then-requantize
round differently, and an inserted RESHAPE can change which kernels onnxruntime fuses;
int8 FULLY_CONNECTED and BATCH_MATMUL are computed in integers as LiteRT does).
Outputs whose ONNX form cannot be made or run are compared on LiteRT only, and the
result says which and why.

In a deep quantized model those one-step differences compound (Keras' int8 ResNet50:
each of its 53 convs within one step, the output 5 steps off); so does float rounding
in a deep float model whose output cancels large terms (MediaPipe's pose landmark
model: its segmentation output 1.2e-4 of its scale off on onnxruntime, each op within
1e-5 of its own; LiteRT's XNNPACK kernels are 3.3e-4 off its builtin ones there). When
the ONNX form misses end to end, the check compares it op by op: each op of the ONNX
form computes from the legalized model's own LiteRT operands, and each result must
agree with LiteRT's (one step, or the float tolerances across kernels). Only then does
the output pass, with a detail that says so; otherwise the first ops that differ are
named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional

import numpy as np
import onnx

from ..errors import first_line
from ..extras import install_hint
from ..kinds.tflite.records import CUSTOM_DOMAIN
from ..ir.dtypes import elem_type
from ..ir.graph import Graph, Value
from ..model import Model
from .compare import STEP_DETAIL, Pairing, across_kernels, compare, tol_of, unless_compared
from .inputs import graph_declared, graph_input_specs, make_feeds, small_then_one
from .child import Remote, RunFault
from .ort import runner as onnx_runner
from .plan import Artifact, Comparison, Feed, Plan, run_plan, stored
from .results import CheckResult, OutputResult
from .runner import Runner
from .runtimes import ONNX, TFLITE, runner_for
from .settings import CheckSettings, settings_of

ORT, LITERT = "onnxruntime", "LiteRT"


def bindings(graph: Graph, fixed: Mapping[str, int]) -> List[Dict[str, int]]:
    """A small size for every dynamic input dim, then 1 (where runtime broadcasting
    runs); ``fixed`` binds a dim for both."""
    return small_then_one([d for _, shape in graph_declared(graph) for d in shape or () if isinstance(d, str)], fixed)


def _sample_dims(graph: Graph, dims: Optional[Mapping[str, int]], sample, j: int) -> Dict[str, int]:
    """The dims sample ``j`` binds (its arrays' shapes); UsageError naming the sample."""
    from ..errors import UsageError
    from .user_inputs import user_dims

    try:
        return user_dims(graph_declared(graph), dims, None, sample)
    except UsageError as e:
        raise UsageError(f"sample {j}: {e}") from None


def _outputs(names) -> str:
    names = list(names)
    return ("output " if len(names) == 1 else "outputs ") + ", ".join(f"'{n}'" for n in names)


class _OnnxSide:
    """The ONNX form of one subgraph on onnxruntime, of the outputs it has a form for:
    the check's second candidate. ``notes`` say which outputs are not compared there,
    and why. ``op_by_op``: (the legalized .tflite, its LiteRT kernels), to judge op by
    op an output that misses end to end (subgraph 0)."""

    def __init__(self, model: Model, k: int, settings: CheckSettings, quantized: Mapping[str, bool], prefix: str,
                 op_by_op=None, given=None):
        from ..kinds.tflite.onnx_form import onnx_form

        self.graph = model.graphs[k]
        self.provider, self.quantized, self.prefix = settings.provider, quantized, prefix
        self.rtol, self.atol, self.op_by_op = settings.rtol, settings.atol, op_by_op
        # onnxruntime computes quantized ops in float and requantizes: a float output
        # downstream of them agrees within one step of the coarsest quantization.
        self.step = max((max(v.quant.scale) for n in self.graph.nodes() for v in n.outputs
                         if v.quant is not None and v.quant.scale), default=0.0)
        self.notes: List[str] = []
        self.runner: Optional[Runner] = None
        self.form: Optional[onnx.ModelProto] = None
        self.results: Dict[str, Value] = {}  # the form's tensors that hold op results, for _op_by_op
        self.litert_all = None  # the legalized model on LiteRT keeping every tensor, for _op_by_op
        try:
            if given is not None:  # the legalized form the run writes: (its proto, its op results)
                (form, results), left_out = given, {}
                self.results.update(results)
            else:
                form, left_out = onnx_form(model, k, results=self.results)
        except Exception as e:  # noqa: BLE001 - a translation bug must not stop the LiteRT side
            self.note([n.inputs[0].name for n in self.graph.outputs], f"no ONNX form: {first_line(e)}")
            return
        by_reason: Dict[str, List[str]] = {}
        for name, why in left_out.items():
            by_reason.setdefault(why, []).append(name)
        for why, names in by_reason.items():
            self.note(names, why)
        self.form = form
        if form is None:
            return
        try:
            # Basic optimizations: onnxruntime 1.31's QDQ fusions reject some valid
            # quantized graphs (QLinearAdd after an Expand: "Scale and Zero-point must be
            # a scalar") and would compute int8 ops in integer kernels, not as written.
            # (its bytes: the child hands them to onnxruntime as they are, not parsed and
            # serialized again)
            self.runner = onnx_runner(form.SerializeToString(), self.provider,
                                      f"the ONNX form of subgraph '{self.graph.name}'", basic=True).begin()
        except RunFault:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime's own words
            self.note([o.name for o in form.graph.output], f"onnxruntime cannot load their ONNX form: {first_line(e)}")

    def ready(self) -> "_OnnxSide":
        """Wait for its model to load in the child (begun in ``__init__``); a note, and
        no runner, if onnxruntime does not take it."""
        if self.runner is not None:
            try:
                self.runner.activate()
            except RunFault:
                raise
            except Exception as e:  # noqa: BLE001 - onnxruntime's own words
                self.note([o.name for o in self.form.graph.output],
                          f"onnxruntime cannot load their ONNX form: {first_line(e)}")
                self.runner.deactivate()
                self.runner = None
        return self

    def close(self) -> None:
        """Let its models in the child go."""
        if self.runner is not None:
            self.runner.deactivate()
        if self.litert_all is not None:
            self.litert_all.close()

    def note(self, names, why: str) -> None:
        text = f"{_outputs(names)} of subgraph '{self.graph.name}' not compared on {ORT}: {why}"
        if text not in self.notes:
            self.notes.append(text)

    def run(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The outputs the form computes; none (and a note) if onnxruntime fails on it:
        the ONNX form is the second reference, not what is checked."""
        if self.runner is None:
            return {}
        try:
            return self.runner.infer(feeds)
        except RunFault:
            raise
        except Exception as e:  # noqa: BLE001 - the runtime's own words
            self.note(self.runner.outputs, f"it fails on their ONNX form: {first_line(e)}")
            return {}

    def compare(self, feeds: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> List[OutputResult]:
        """The form's outputs against LiteRT's ``expected`` (across kernels), judged op
        by op where they miss end to end (``op_by_op``)."""
        formed = self.run(feeds)
        rtol, atol = self.rtol, self.atol
        outs = [compare(f"{self.prefix}{n} ({ORT})", e, formed[n], tol_of(rtol, n),
                        across_kernels(e, tol_of(rtol, n), max(tol_of(atol, n), self.step)),
                        quantized=self.quantized.get(n, False)) for n, e in expected.items() if n in formed]
        if self.op_by_op is None or not any(_off_by_value(o) for o in outs):
            return outs
        if self.litert_all is None:
            legalized, kernels = self.op_by_op
            self.litert_all = Remote(OpByOp, str(legalized), kernels, model=str(legalized), runtime=LITERT)
        return _op_by_op(outs, (self.form, self.results), feeds, self.litert_all, self.provider,
                         float(rtol), float(atol), self.step)


def _litert_kernels(original: Path, model: Model):
    """LiteRT's builtin kernels, or its default op resolver (and delegate) when a custom
    op has no builtin kernel (asked of the original, in the child); the second item says
    which, for the report."""
    from .litert import LiteRTModel

    custom = sorted({n.op_type for g in model.graphs for n in g.ops() if n.domain == CUSTOM_DOMAIN})
    if not custom:
        return "builtin", LITERT
    ref = Remote(LiteRTModel, str(original), model=str(original), runtime=LITERT)
    try:
        unresolved = ref.call("unresolved_custom_op")
    finally:
        ref.close()
    if unresolved:
        return "default", f"{LITERT} default resolver (XNNPACK), for custom ops {', '.join(custom)}"
    return "builtin", LITERT


def check_tflite(original: Path, legalized: Path, model: Model, settings: Optional[CheckSettings] = None, *,
                 dims: Optional[Mapping[str, int]] = None, inputs: Optional[Mapping[str, np.ndarray]] = None,
                 litert_only: bool = False, samples: Optional[List[Mapping[str, np.ndarray]]] = None,
                 expected: Optional[List[Mapping[str, np.ndarray]]] = None, reference: str = "",
                 form=None, **changes) -> CheckResult:
    """Compare ``legalized`` (written from ``model``) with ``original`` as above.
    Output names say which runtime produced them: ``out (LiteRT)``, ``out (onnxruntime)``.
    Outputs the ONNX form cannot compute are compared on LiteRT only, and the result's
    ``error`` says which and why (the check ran in part). ``litert_only``: no ONNX form
    (``--against``: two TFLite models compared on LiteRT). ``samples``: the main
    subgraph is fed these input dicts, one binding each (an input a sample leaves out
    is synthesized), instead of synthesized bindings; ``record``: the main subgraph's
    runs are kept (``CheckResult.runs``, for --save-inputs / --save-outputs);
    ``expected`` (with ``samples``: per sample the outputs by name, from ``reference``)
    stands for the original's LiteRT run of the main subgraph. ``form``: the main
    subgraph's ONNX form as the run writes it (``emit_formats.OnnxForm``'s proto and
    results), run instead of one translated here. Every model runs in the
    child (``child.py``); one that faults there leaves the check not run (raised with
    ``litert_only``, for ``--against``)."""
    from .litert import LiteRTError, litert_available

    if not litert_available():
        return CheckResult(False, LITERT, error="ai-edge-litert is not installed: install the litert extra:"
                                                 f" {install_hint('litert')}")
    try:
        return run_plan(_check_plan(original, legalized, model, settings_of(settings, **changes), dims=dims,
                                    inputs=inputs, litert_only=litert_only, samples=samples, expected=expected,
                                    reference=reference, form=form))
    except LiteRTError as e:
        return CheckResult(False, LITERT, error=str(e))


def _check_plan(original: Path, legalized: Path, model: Model, settings: CheckSettings, *, dims, inputs, litert_only,
                samples, expected, reference, form=None) -> Plan:
    """The check as a plan: per subgraph that has outputs, the legalized model against
    the original on LiteRT, each loaded once (one interpreter runs every subgraph of its
    model: ``LiteRTRunner.select``), and the subgraph's ONNX form on onnxruntime as a
    second candidate."""
    from .litert import LiteRTError
    from .samples import _stored_names

    kernels, litert = _litert_kernels(original, model)
    provider = settings.provider
    runtime = runner_for(TFLITE, provider)
    onnx_label = runner_for(ONNX, provider).names(provider)  # (UsageError for a provider it does not have)
    notes: List[str] = []
    sides: List[_OnnxSide] = []
    comparisons: List[Comparison] = []

    def side(k: int, quantized, prefix: str) -> _OnnxSide:
        made = _OnnxSide(model, k, settings, quantized, prefix, (legalized, kernels) if k == 0 else None,
                         given=form if k == 0 else None)
        sides.append(made)
        return made

    for k, graph in enumerate(model.graphs):
        if not graph.outputs:
            continue  # computes nothing to compare (an init subgraph of CALL_ONCE)
        quantized = {n.inputs[0].name: n.inputs[0].quant is not None for n in graph.outputs}
        prefix = f"{graph.name}/" if len(model.graphs) > 1 else ""
        ref = Artifact("the original", lambda: runtime.runner(original, provider, kernels=kernels),
                       key=("original", str(original)), part=k)
        if expected is not None and k == 0:  # the stored outputs stand for the original's run
            keep, more = _stored_names(expected, samples, [n.inputs[0].name for n in graph.outputs],
                                       [n.output.name for n in graph.inputs])
            notes += more
            ref = stored(expected, keep, reference)
        new = Artifact("the legalized model", lambda: runtime.runner(legalized, provider, kernels=kernels),
                       key=("legalized", str(legalized)), part=k)
        specs = graph_input_specs(graph)
        feeds = [Feed(binding, lambda binding=binding, given=given, specs=specs: make_feeds(specs, binding, given,
                                                                                         settings.seed),
                      "user" if j is not None else "synthesized", {f"{prefix}{key}": v for key, v in binding.items()},
                      sample=j) for binding, given, j in _plan(graph, k, samples, dims, inputs)]
        pairing = Pairing(label=lambda i, n, prefix=prefix: f"{prefix}{n} ({LITERT})",
                          quantized=lambda n, quantized=quantized: quantized.get(n, False))
        comparisons.append(Comparison(
            ref, new, feeds, pairing, reference_errors=LiteRTError, candidate_errors=LiteRTError,
            also=None if litert_only else (lambda k=k, quantized=quantized, prefix=prefix: side(k, quantized, prefix)),
            record=settings.record and k == 0))

    def made() -> CheckResult:
        return CheckResult(True, litert if litert_only else f"{litert} + {ORT} {onnx_label}",
                           reference=reference if expected is not None else "", notes=list(notes))

    def conclude(result: CheckResult) -> CheckResult:
        return _concluded(result, samples, [n for s in sides for n in s.notes], litert)

    return Plan(comparisons, settings.rtol, settings.atol, LITERT, conclude, result=made, raise_faults=litert_only,
                reads=(original, legalized))


def _plan(graph: Graph, k: int, samples, dims, inputs) -> list:
    """(binding, inputs given, sample index) of each run of subgraph ``k``: the stored
    samples, which feed the main graph, else the bindings of its dims."""
    if samples is not None and k == 0:
        return [(_sample_dims(graph, dims, sample, j), sample, j) for j, sample in enumerate(samples)]
    return [(binding, inputs or {}, None) for binding in bindings(graph, dims or {})]


def _concluded(result: CheckResult, samples, notes: List[str], litert: str) -> CheckResult:
    """The result once every subgraph ran: its verdict, its per-sample summary, and the
    ONNX side's notes (the provider naming only what ran)."""
    unless_compared(result, "the original model fails on LiteRT for every input binding tried: ")
    if samples is not None and len(samples) > 1:
        from .samples import across

        result.samples = across(result)
    if notes:
        result.error = "; ".join(notes) if result.ran else result.error
        if not any(o.name.endswith(f"({ORT})") for b in result.bindings for o in b.outputs):
            result.provider = litert  # the summary names only what ran
    return result


ANCHOR = "@litert"  # the suffix of the graph input that feeds an op LiteRT's operand


def _off_by_value(o: OutputResult) -> bool:
    """A miss in the values (not in shape, dtype, or a failed run)."""
    return not o.ok and (not o.detail or o.detail == STEP_DETAIL)


def _anchored(form: onnx.ModelProto, results: Mapping[str, Value]) -> onnx.ModelProto:
    """``form`` with every op result of ``results`` read, wherever a node reads it, from
    a graph input ``<name>@litert``, and given out as a graph output: each op then
    computes from the operands it is fed, and shows its own error only."""
    m = onnx.ModelProto()
    m.CopyFrom(form)
    for node in m.graph.node:
        for i, x in enumerate(node.input):
            if x in results:
                node.input[i] = x + ANCHOR
    given = {o.name for o in m.graph.output}
    for name, v in results.items():
        m.graph.input.append(onnx.helper.make_tensor_value_info(name + ANCHOR, elem_type(v.type.dtype), None))
        if name not in given:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type(v.type.dtype), None))
    return m


class OpByOp:
    """Built in the child: the legalized model on LiteRT keeping every tensor. ``differ``
    runs it and the anchored ONNX form there and compares op by op there, so that the
    intermediate tensors never cross the pipe (three times: out, in, out again)."""

    runtime = LITERT

    def __init__(self, legalized: str, kernels: str):
        from .litert import LiteRTModel

        self.litert = LiteRTModel(legalized, kernels=kernels, keep_tensors=True)
        self.tensors: Dict[str, np.ndarray] = {}

    def run(self, feeds: Mapping[str, np.ndarray]) -> List[str]:
        """Run it on ``feeds``; the names of the tensors LiteRT gives (kept here)."""
        self.litert.run(feeds, 0)
        self.tensors = self.litert.tensors()
        return list(self.tensors)

    def differ(self, feeds: Mapping[str, np.ndarray], anchored: onnx.ModelProto, provider: str,
               fed: List[list], tolerances: List[float]) -> List[list]:
        """[tensor name, detail, max abs err] of each op of ``fed`` ([form name, tensor
        name, quantized]) whose result, computed by ``anchored`` from the operands of the
        last ``run``, differs from LiteRT's."""
        rtol, atol, step = tolerances
        tensors = self.tensors
        feed = dict(feeds)
        feed.update({n + ANCHOR: tensors[t] for n, t, _ in fed})
        from .ort_session import OrtRunner, providers

        with OrtRunner(anchored, providers(provider), True) as sess:
            got = sess.infer(feed)
        bad = []
        for n, t, quantized in fed:
            r = compare(t, tensors[t], got[n], rtol, across_kernels(tensors[t], rtol, max(atol, step)),
                        full_stats=False, quantized=quantized)  # (the verdict only: no stats are reported)
            if not r.ok:
                bad.append([t, r.detail, float(r.max_abs_err)])
        return bad


def _op_by_op(outs: List[OutputResult], form, feeds: Mapping[str, np.ndarray], litert, provider: str,
              rtol: float, atol: float, step: float) -> List[OutputResult]:
    """``outs`` (the ONNX form's outputs, some off end to end) judged op by op against
    the legalized model's LiteRT run on the same ``feeds`` (``litert``: an ``OpByOp`` in
    the child)."""

    proto, results = form
    try:  # both in the child: LiteRT keeping every tensor, and the anchored ONNX form
        names = set(litert.call("run", dict(feeds)))
        fed = {n: v for n, v in results.items() if v.name in names}
        differ = litert.call("differ", dict(feeds), _anchored(proto, fed), provider,
                             [[n, v.name, v.quant is not None and bool(v.quant.scale)] for n, v in fed.items()],
                             [float(rtol), float(atol), float(step)])
    except RunFault:
        raise
    except Exception as e:  # noqa: BLE001 - LiteRT or onnxruntime refused: the end-to-end result stands
        return [o if o.ok else OutputResult(o.name, False, o.max_abs_err, o.max_rel_err,
                                            f"{o.detail or 'outside the tolerances'}; not compared op by op: "
                                            f"{first_line(e)}") for o in outs]
    producers = {v.name: (v.producer.op_type if v.producer is not None else "?") for v in fed.values()}
    bad = [f"'{t}' ({producers.get(t, '?')}) {detail or f'max abs err {err:.3g}'}" for t, detail, err in differ]
    judged = []
    for o in outs:
        if o.ok or not _off_by_value(o):
            judged.append(o)
            continue
        end = f"{o.max_abs_err:.3g} {'steps' if o.detail else 'max abs err'} off end to end"
        if bad:
            judged.append(OutputResult(o.name, False, o.max_abs_err, o.max_rel_err,
                                       f"{end}; op by op, {len(bad)} of {len(fed)} ops differ from LiteRT: "
                                       + ", ".join(bad[:3])))
        else:
            judged.append(OutputResult(o.name, True, o.max_abs_err, o.max_rel_err,
                                       f"{end} ({'quantized' if step else 'float'} rounding compounds); op by op,"
                                       f" all {len(fed)} ops agree with LiteRT"))
    return judged
