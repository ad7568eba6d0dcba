"""The library API: ``load``, ``save``, ``verify``, ``legalize``, ``numeric``.

Each takes a model in any of the forms a pipeline has at hand:

- a path (``str`` or ``os.PathLike``) to a model file of any format ``legalize`` reads
  (ONNX, TFLite, TOSA MLIR, a ``torch.export`` ``.pt2``);
- an ``onnx.ModelProto``;
- an ``onnx_ir.Model`` (the IR of onnxscript and ``onnx_ir``);
- legalize's own ``Model`` (what ``load`` returns: the IR, ``model.graph``);
- for ``load``, also a PyTorch ``nn.Module`` with example inputs, or an
  ``ExportedProgram`` (the optional ``torch`` extra).

``legalize`` gives back the kind it was given; ``load`` always gives a ``Model``,
``save`` the path written, ``verify`` a ``VerifyResult``, ``numeric`` a ``CheckResult``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional, Tuple

import onnx

from .numeric import ATOL, RTOL
from .errors import NotLegal  # noqa: F401 - the API's error, importable from here too
from .job import RunOptions, RunResult
from .kinds.onnx.exporter import save_model
from .exporters.as_onnx import to_onnx
from .model import Model


# -- what kind of model was given -----------------------------------------------------

def _is_ir(obj) -> bool:
    """An ``onnx_ir.Model`` (without importing onnx_ir, an optional dependency: a
    caller who has one has imported it)."""
    mod = sys.modules.get("onnx_ir")
    return mod is not None and isinstance(obj, mod.Model)


def _is_torch(obj) -> bool:
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(obj, (mod.nn.Module, mod.export.ExportedProgram))


def _is_path(obj) -> bool:
    return isinstance(obj, (str, os.PathLike))


def _kind(obj) -> str:
    if isinstance(obj, Model):
        return "model"
    if isinstance(obj, onnx.ModelProto):
        return "proto"
    if _is_ir(obj):
        return "ir"
    if _is_path(obj):
        return "path"
    if _is_torch(obj):
        return "torch"
    from .ir import Graph

    if isinstance(obj, Graph):
        return "graph"
    raise TypeError(f"expected a path, an onnx.ModelProto, an onnx_ir.Model or a legalizer Model,"
                    f" not {type(obj).__module__}.{type(obj).__qualname__}")


def _ir_to_proto(model) -> onnx.ModelProto:
    import onnx_ir

    return onnx_ir.serde.serialize_model(model)


def _proto_to_ir(proto: onnx.ModelProto):
    import onnx_ir

    return onnx_ir.serde.deserialize_model(proto)


def _as_proto(obj) -> Any:
    """A ModelProto, or a path, for the onnxruntime check."""
    kind = _kind(obj)
    if kind == "proto":
        return obj
    if kind == "ir":
        return _ir_to_proto(obj)
    if kind == "model":
        return to_onnx(obj)
    if kind == "path":
        return Path(obj)
    raise TypeError(f"cannot run a {kind} on onnxruntime")


# -- the API --------------------------------------------------------------------------

def load(source, infer: bool = True, *, example_inputs=None, dynamic_shapes=None, trust_pt2: bool = False) -> Model:
    """Load ``source`` into legalize's IR (a ``Model``; its graph is ``model.graph``).

    ``source`` is a path (the format is recognized by content: ONNX, TFLite, TOSA
    MLIR, or a ``torch.export`` archive ``.pt2``, which is exported to ONNX with
    ``torch.onnx.export(..., dynamo=True)`` keeping its symbolic dims), an
    ``onnx.ModelProto`` (not modified), an ``onnx_ir.Model`` (not modified), a
    ``Model`` (returned as it is), or a PyTorch ``nn.Module`` with ``example_inputs``
    (a tuple of tensors) and optional ``dynamic_shapes`` (as ``torch.export.export``
    takes them; the symbolic dims become ONNX dim params), or an ``ExportedProgram``.
    A model from PyTorch keeps its program in ``model.torch``: ``numeric`` runs it as a
    reference. ``infer`` runs ONNX shape inference on import.

    A ``.pt2`` is pickle and more: it is read so that nothing in it runs, and one that
    needs torch's unsafe unpickling (or would run code another way) is refused;
    ``trust_pt2=True`` loads it with ``torch.export.load`` as it is, only for a file
    you trust.

    Raises ``BadInput`` (a ``LegalizeError``) for a missing, corrupt or unsupported
    input, and for PyTorch input without the ``torch`` extra.
    """
    kind = _kind(source)
    if kind == "model":
        return source
    if kind == "path":
        from .importers.reader import read_model as load_file, sniff
        from .kinds.base import resolve
        from .kinds.registry import named

        kind = named(sniff(Path(source)))
        if kind is not None and kind.library_read is not None:
            return resolve(kind.library_read)(Path(source), infer=infer, trust=trust_pt2)
        return load_file(Path(source), infer=infer, trust_pt2=trust_pt2)
    if kind == "torch":
        from .kinds.pt2.onnx_export import load_module

        return load_module(source, example_inputs, dynamic_shapes, infer=infer)
    if kind == "graph":
        raise TypeError("load takes a model, not a Graph")
    from .kinds.onnx.importer import import_model

    proto = _ir_to_proto(source) if kind == "ir" else source
    return import_model(proto, None, infer=infer)


def save(model, path, *, force: bool = False, inspect=None) -> Path:
    """Write ``model`` to ``path`` atomically and return the path; never over the
    model's own source file, nor over an existing file without ``force``.

    A ``Model`` is written in its own format (ONNX or TFLite; a model from PyTorch as
    ONNX); a ModelProto or an ``onnx_ir.Model`` as ONNX. External data stays external
    (see ``kinds.onnx.exporter.save_model``, also for ``inspect``, a look at the written
    file before it takes its name)."""
    kind = _kind(model)
    if kind in ("proto", "ir"):
        proto = model if kind == "proto" else _ir_to_proto(model)
        return save_model(proto, Path(path), None, force=force, inspect=inspect)
    if kind != "model":
        raise TypeError(f"save takes a model, not a {kind}")
    from .formats import format_of

    with format_of(model).stage(model, Path(path), force=force) as staged:
        if inspect is not None:
            inspect(staged.path)
        staged.accept()
    return Path(path)


def verify(model, profile: str = "mlir", *, assume_dynamic_not_one: bool = False, **kwargs):
    """Verify every broadcasting node under ``profile`` (``mlir``, ``strict``, ``tosa``,
    ``xla``) and return a ``VerifyResult``: ``.ok``, ``.violations`` (diagnostics as
    values), ``.constraints`` (runtime conditions that cannot be decided statically).

    ``model`` is a ``Graph`` (legalize's IR: ``model.graph``), a ``Model`` (all its
    top-level graphs), a path, a ModelProto or an ``onnx_ir.Model`` (loaded first).
    ``assume_dynamic_not_one`` is the strict symbolic mode (no dynamic dim is 1)."""
    kind = _kind(model)
    if kind == "graph":
        from .verifier import verify as verify_graph

        return verify_graph(model, profile, assume_dynamic_not_one=assume_dynamic_not_one, **kwargs)
    from .pipeline import verify_model

    return verify_model(load(model), profile, assume_dynamic_not_one, **kwargs)


def _legalize_model(model: Model, target: str, debug: bool, assume_dynamic_not_one: bool,
                    level: Optional[str] = None):
    """The job's verify, legalize and verify stages on ``model`` in memory
    (``pipeline.run_model``); NotLegal (carrying the run's ``Result``) when the input or
    the output is not legal."""
    from .pipeline import RunOptions, run_model

    res = run_model(model, RunOptions(target=target, level=level, debug=debug,
                                      assume_dynamic_not_one=assume_dynamic_not_one))
    bad = res.input_verification.violations
    if bad:
        raise NotLegal(f"the input violates the Broadcastable trait ({len(bad)} violation"
                       f"{'s' if len(bad) != 1 else ''}; first: {bad[0]})", bad,
                       result=_result(res))
    bad = res.output_verification.violations
    if bad:
        from .report import output_cause

        raise NotLegal(f"the legalized model violates the '{target}' profile"
                       f" ({output_cause([d.to_json() for d in bad])}):"
                       f" {bad[0]}", bad, result=_result(res))
    return model.legalized


def _result(res: RunResult, output=None):
    from .report import checked
    from .result import Result

    return Result.from_report(checked(res.report.to_json()), output, exit_code=res.exit_code)


def legalize_proto(proto: onnx.ModelProto, target: str = "tosa", *, debug: bool = False,
                   assume_dynamic_not_one: bool = False, level: Optional[str] = None) -> Tuple[onnx.ModelProto, Any]:
    """``proto`` legalized: a new ModelProto and the ``LegalizeResult`` (stats,
    warnings). ``proto`` itself is not modified."""
    from .kinds.onnx.importer import import_model

    model = import_model(proto, None)
    done = _legalize_model(model, target, debug, assume_dynamic_not_one, level)
    return to_onnx(model), done


def legalize(model, target: str = "tosa", *, debug: bool = False, assume_dynamic_not_one: bool = False,
             output=None, force: bool = False, check: bool = True, level: Optional[str] = None, **options):
    """Rewrite ``model`` into ``target``'s legal form (``tosa``: equal ranks,
    broadcasting only through size-1 dims; ``xla``: every broadcast explicit) and give
    back the same kind of model:

    - a ``Model`` (legalize's IR): rewritten in place and returned; what changed is
      ``model.legalized`` (a ``LegalizeResult``: ``.stats``, ``.warnings``);
    - an ``onnx.ModelProto``: returns a new, legal ModelProto; the input is untouched;
    - an ``onnx_ir.Model``: returns a new, legal ``onnx_ir.Model``; the input is
      untouched (``legalizer.onnx_ir.LegalizePass`` is the in-place pass form);
    - a path: does what the ``legalize`` command does - load, verify, legalize, verify
      under the target's profile, check on onnxruntime (and against PyTorch for a
      ``.pt2``) unless ``check=False``, write ``output`` (default
      ``<stem>.legal.<ext>`` beside the input; ``<stem>.legal.onnx`` for a ``.pt2``)
      - and returns a ``legalizer.result.Result``: ``.output`` (the path written),
      ``.report`` (the JSON report as a dict), ``.check`` (whether the check ran, ran
      in part or did not run, and why), ``.warnings`` and ``.refused`` (what the target
      still refuses: it stays on the CPU). ``options`` are the command's
      (``OPTIONS``): ``provider``, ``dims``, ``input_shapes`` such as
      ``{"x": (1, 512)}``, ``inputs`` (arrays by input name or an ``.npz`` path),
      ``rtol``, ``atol``, ``emit`` (formats to write), ``profile``, ``trust_pt2``,
      ``require_check`` (a check that did not run fully raises ``NotLegal``),
      ``allow_fallback`` (a deployment target's partial placement is accepted);
      another name is a ``TypeError`` that lists them.

    Every form verifies the input and the output as the command does, and raises
    ``NotLegal`` (exit code 1) when the input violates the Broadcastable trait, the output
    its target's profile, or the check finds different outputs, or (a path) the target
    still refuses ops and ``allow_fallback`` is not given (nothing is written then; a
    ``Model`` may have been rewritten already); ``NotLegal.result`` is the run's
    ``Result``. Every form raises ``LegalizeError`` for bad
    input or usage. ``assume_dynamic_not_one`` is the strict symbolic mode; ``level``
    the target's level (``tosa``: ``8k``, the default, whose MAX_RANK 6 rank folding
    keeps elementwise regions within, or ``none``)."""
    kind = _kind(model)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"legalize() got an unexpected keyword argument '{unknown[0]}'; its keyword arguments are"
                        f" debug, assume_dynamic_not_one, output, force, check, level and, for a path,"
                        f" {', '.join(OPTIONS)}")
    if options and kind != "path":
        raise TypeError(f"legalize() of a {kind if kind != 'proto' else 'ModelProto'} runs no check and writes"
                        f" nothing: '{sorted(options)[0]}' applies to a path")
    if kind == "model":
        model.legalized = _legalize_model(model, target, debug, assume_dynamic_not_one, level)
        return model
    if kind == "proto":
        return legalize_proto(model, target, debug=debug, assume_dynamic_not_one=assume_dynamic_not_one,
                              level=level)[0]
    if kind == "ir":
        new, _ = legalize_proto(_ir_to_proto(model), target, debug=debug,
                                assume_dynamic_not_one=assume_dynamic_not_one, level=level)
        return _proto_to_ir(new)
    if kind == "path":
        if level is not None:
            options["level"] = level
        return _legalize_file(Path(model), target, assume_dynamic_not_one, output, force, check, options)
    raise TypeError(f"legalize takes a model or a path, not a {kind}; load it first (legalizer.load)")


# The keyword arguments ``legalize`` of a path passes on to the job (``RunOptions``):
# the command's options a library call has a use for.
OPTIONS = ("provider", "dims", "input_shapes", "inputs", "rtol", "atol", "emit", "profile", "trust_pt2",
           "require_check", "allow_fallback", "static", "run_timeout", "run_memory", "load_inputs",
           "load_outputs", "save_inputs", "save_outputs", "localize")


def run(path, options, on_stage=None) -> RunResult:
    """The main job on the model at ``path``, as the ``legalize`` command runs it (the
    command calls this): read, verify, legalize, verify, emit, check and write, as
    ``options`` (a ``legalizer.job.RunOptions``: every option of the command; or the
    ``job.Prepared`` that ``pipeline.prepare`` made of them, as the command hands it) say; a
    ``RunResult`` with the report (``.report.to_json()``) and ``.exit_code``, nothing
    raised for violations or mismatches (exit code 1). Raises ``LegalizeError`` for bad
    input or usage. ``on_stage(name, size)`` is called as each stage starts. Most callers
    want ``legalize``, which returns a ``Result`` and raises ``NotLegal``."""
    from .pipeline import run as run_job

    return run_job(Path(path), options, on_stage)


def _legalize_file(path: Path, target: str, not_one: bool, output, force: bool, do_check: bool,
                   options: dict):
    from .errors import EXIT_OK
    from .result import Result

    opts = RunOptions(target=target, output=Path(output) if output is not None else None, force=force,
                      check=do_check, assume_dynamic_not_one=not_one, **options)
    res = run(path, opts)
    from .report import checked

    report = checked(res.report.to_json())
    result = Result.from_report(report, exit_code=res.exit_code)
    if do_check and res.exit_code == EXIT_OK and not result.check.full:  # said, not only recorded
        import warnings

        how = "ran in part" if result.check.ran else "did not run"
        warnings.warn(f"{path}: legalized, but the numeric check {how}: {result.check.why}", RuntimeWarning,
                      stacklevel=3)
    if res.exit_code != EXIT_OK:
        bad = report["violations"]
        refused = (report.get("target_rules") or {}).get("refused_after") or []
        from .report import verdict

        why = (f"{len(bad)} violation{'s' if len(bad) != 1 else ''} ({bad[0]['message']})" if bad
               else f"the check is required (require_check) and {res.unchecked}" if res.unchecked
               else verdict(report, legalizing=True)[1].replace("--allow-fallback", "allow_fallback=True")
               if refused and not opts.allow_fallback and not (res.check and res.check.ran and not res.check.ok)
               else "the legalized model computes different outputs" +
               (f" ({res.localization.line()})" if res.localization and res.localization.culprit else ""))
        raise NotLegal(f"{path}: {why}; nothing written", bad, report, result)
    return result


def check(original, legalized=None, *, provider: str = "auto", dims=None, inputs=None, rtol: float = RTOL,
          atol: float = ATOL, input_shapes=None, require_check: bool = False, trust_pt2: bool = False,
          samples=None, expected=None, **kwargs):
    """Run ``original`` and ``legalized`` on onnxruntime on the same inputs, for each
    binding of the dynamic input dims (a small size and 1, or ``dims``; when the original
    rejects all of those, bindings it accepts are searched for: ``result.search``), and
    compare every output; returns a ``CheckResult`` (``.ok``, ``.bindings`` with each
    output's ``max_abs_err``/``max_rel_err``, ``.to_json()``: the report's ``check``).

    Each is a path, a ModelProto, an ``onnx_ir.Model`` or a ``Model``. A ``Model``
    loaded from PyTorch (a ``.pt2``, an ``nn.Module``) as ``original`` is compared as
    its original ONNX export and, besides, as PyTorch running the program
    (``result.torch``, provider ``"torch"``); so is the path of a ``.pt2``. With ``legalized`` left out,
    ``original`` is a ``Model`` that was legalized in place, compared with where it
    came from: its source file, or its PyTorch program and export. ``inputs`` maps
    input names to arrays (instead of synthesized data), or is the path of an ``.npz``
    of them; ``input_shapes`` maps input names to shapes (``{"x": (1, 512)}``) that bind
    their dynamic dims. ``require_check`` raises ``NotLegal`` when the check did not
    run, or ran in part; ``trust_pt2`` as ``load``. ``samples`` (a list of input dicts,
    or the path of Polygraphy's input data or an ``.npz``) are fed one by one instead of
    synthesized bindings, and ``expected`` (per sample the outputs by name, or the path
    of Polygraphy's run results or an ``.npz``) is then the reference instead of running
    ``original`` (``check.samples`` in the report: statistics across the samples in ``result.samples``)."""
    from .numeric.user_inputs import as_arrays, refuse_zero_dim
    from dataclasses import replace

    from .numeric.ort import check as check_ort
    from .numeric.settings import CheckSettings
    from .importers.reader import check_external_data, sniff
    from .formats import of_kind
    from .kinds.base import resolve
    from .kinds.registry import named
    from .pipeline import range_hints, unchecked

    for name, size in (dims or {}).items():  # as the command line's --dim
        refuse_zero_dim(name, size)
    from .numeric import child

    # the folders the child may read (Landlock): named before it starts, so that it starts once
    child.readable(*(m for m in (original, legalized) if _is_path(m)))

    pair = named(sniff(Path(original))) if _is_path(original) and _is_path(legalized) else None
    if pair is not None and pair.pair_check is not None and sniff(Path(legalized)) == pair.name:
        # two files of a kind with its own runtime (``legalize m.pt2``'s output: both run in PyTorch)
        result = resolve(pair.pair_check)(Path(original), Path(legalized), CheckSettings(provider, rtol, atol),
                                          dims=dims, inputs=as_arrays(inputs), trust=trust_pt2)
        if require_check and unchecked(result):
            raise NotLegal(f"the check is required (require_check) and {unchecked(result)}")
        return result

    fmt = of_kind(sniff(Path(original))) if _is_path(original) else None
    if fmt is not None and not fmt.runs_as_file:
        original = load(original, trust_pt2=trust_pt2)  # a .pt2: its ONNX export, and the program as PyTorch runs it
    for m in (original, legalized):  # onnxruntime reads a path's external data: checked first
        if _is_path(m):
            check_external_data(Path(m))
    source = original.torch if isinstance(original, Model) else None
    if legalized is None:
        if not isinstance(original, Model) or (source is None and original.source is None):
            raise TypeError("check(model) with one argument takes a Model loaded from a file or from PyTorch;"
                            " otherwise give the original and the legalized model")
        legalized = original
        reference: Any = source.onnx if source is not None else Path(original.source)
    else:
        reference = source.onnx if source is not None else _as_proto(original)
    new = _as_proto(legalized)
    inputs = as_arrays(inputs)
    settings = CheckSettings(provider, rtol, atol)
    if samples is not None or expected is not None:
        return _check_samples(reference, new, samples, expected, settings, dims, require_check)
    kwargs.setdefault("hints", range_hints(source))
    settings = replace(settings, **{k: kwargs.pop(k) for k in ("max_bindings", "seed", "not_one", "record")
                                    if k in kwargs})
    from .numeric.plan import Session

    with Session() as session:  # the legalized model loaded once for the ONNX and the PyTorch check
        result = check_ort(reference, new, settings, dims=dims, inputs=inputs, input_shapes=input_shapes,
                           session=session, **kwargs)
        if source is not None:
            from .numeric.user_inputs import user_dims
            from .numeric.user_inputs import declared_shapes
            from .numeric.torch_ref import check_torch

            keep = {"choices": kwargs["choices"]} if "choices" in kwargs else {}
            if result.search is not None and result.search.found is not None:
                keep["choices"], keep["searched"] = result.search.choices, True
            bound = user_dims(declared_shapes(source.onnx), dims, input_shapes, inputs)
            result.torch = check_torch(source, new, replace(settings, record=False), dims=bound, inputs=inputs,
                                       session=session, **keep)
    if require_check and unchecked(result):
        raise NotLegal(f"the check is required (require_check) and {unchecked(result)}")
    return result


def _check_samples(reference, new, samples, expected, settings, dims, require_check: bool):
    """``check`` over stored samples (the report's ``check.samples``), read from files when paths."""
    from .numeric.golden import read_inputs, read_outputs
    from .numeric.samples import check_samples
    from .errors import UsageError
    from .pipeline import unchecked

    if samples is None:
        raise UsageError("expected outputs are compared on the inputs they were computed from: give samples")
    samples = read_inputs(Path(samples), "samples") if _is_path(samples) else [dict(s) for s in samples]
    where = ""
    if _is_path(expected):
        path = Path(expected)
        name, expected, _ = read_outputs(path, "expected")
        where = f"{path.name} ({name})" if name else path.name
    result = check_samples(reference, new, samples, settings, expected=expected, reference=where, dims=dims)
    if require_check and unchecked(result):
        raise NotLegal(f"the check is required (require_check) and {unchecked(result)}")
    return result
