"""``--emit``: the formats a legalized model is written in, besides (or instead of) its
own. Each is written beside the output's stem (``m.legal.onnx`` -> ``m.legal.tosa.mlir``).

A TFLite model's ONNX-op form is made once (``onnx_op_form``: translated in memory, read
into the IR with one shape inference, legalized): ``--emit onnx`` writes it, the MLIR
emitters read it, and the check runs it on onnxruntime, so what is written is what was
checked.

Every format but the native one (MLIR, a TFLite model's ONNX form) is made before
anything is written, so a model with an op that cannot be emitted fails with nothing on
disk; files are written only after the check passed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from .errors import BadInput, UsageError
from .atomic_files import atomic_output, check_output_path
from .model import Model
from .ir.graph import INPUT, OP
from .ir.types import TensorType
from .exporters.as_onnx import translated
from .kinds.registry import KINDS, named, of_suffix
from .targets import TARGET_OF_DIALECT, Target, target as target_named

# The MLIR formats' suffixes; the others are the written kinds' own (``Kind.written``).
MLIR_SUFFIX = {"stablehlo": ".stablehlo.mlir", "stablehlo-bytecode": ".stablehlo.mlirbc", "tosa": ".tosa.mlir"}


def suffixes() -> Dict[str, str]:
    """Each --emit format's suffix: each written kind's (``onnx``, ``tflite``, ``pt2``),
    then the MLIR formats'."""
    return {**{k.name: k.written for k in KINDS if k.written}, **MLIR_SUFFIX}


def emit_paths(output: Path, formats: List[str], native: str) -> Dict[str, Path]:
    """Where each format goes: the native one at ``output``, the others beside its stem."""
    suffix = suffixes()
    stem = output.with_suffix("") if output.suffix == suffix.get(native) else output
    return {f: output if f == native else Path(f"{stem}{suffix[f]}") for f in formats}


def check_output_suffix(output: Path, native: str) -> None:
    """UsageError when ``output`` (the model in its own format, ``native``) has the suffix
    of another kind's files (``-o m.tflite`` for an ONNX model: a file that lies)."""
    suffix, own = Path(output).suffix.lower(), named(native)
    other = of_suffix(suffix)
    if other is not None and suffix != own.written:
        raise UsageError(f"{output}: a '{suffix}' name, but the legalized model is {own.title}:"
                         f" name it '*{own.written}' (--emit writes other formats beside it)")


def validate(formats: List[str], native: str, target: str) -> List[str]:
    """The formats to write (default: ``native``, the model's own), or UsageError."""
    formats = list(dict.fromkeys(formats)) or [native]
    known = suffixes()
    for f in formats:
        if f not in known:
            raise UsageError(f"--emit must be one of {', '.join(known)}, not '{f}'")
        kind = named(f)
        if kind is not None and kind.native_only is not None and f != native:
            raise UsageError(f"--emit {f}: only {kind.native_only} can be written as {kind.written}")
        need = TARGET_OF_DIALECT.get(f)
        if need is not None and target != need:
            raise UsageError(f"--emit {f} writes the {need} form: add --target {need}")
    return formats


def onnx_form(model: Model, purpose: str = "write it as ONNX"):
    """The ONNX ModelProto of ``model`` (a TFLite model translated); BadInput naming
    every op that has no ONNX form."""
    from .errors import CheckUnavailable
    from .exporters.as_onnx import to_onnx

    if model.aten is not None:  # a torch.export program: its legal program's ONNX export
        from .kinds.pt2.exporter import legal_program, onnx_export

        return onnx_export(legal_program(model))

    try:
        return to_onnx(model)
    except CheckUnavailable as e:
        where = f"{model.source}: " if model.source else ""
        raise BadInput(f"{where}cannot {purpose}: {e}") from None


@dataclass
class OnnxForm:
    """A model of another format as ONNX ops, legalized, made once per run: what the MLIR
    emitters read (``model``), what ``--emit onnx`` writes and the check runs on
    onnxruntime (``proto``, exported from ``model``), and the tensors of ``proto`` that
    hold a TFLite op's result (``results``: what the op-by-op check compares)."""

    model: Model
    proto: Any
    results: Dict[str, Any] = field(default_factory=dict)


def _as_onnx_ir(model: Model, spec: Target, level: Optional[str] = None, purpose: str = "",
                results: Optional[dict] = None) -> Model:
    """The ONNX-op IR the MLIR emitters read: a TFLite model goes through its ONNX form
    (translated in memory, read into the IR with one shape inference), legalized (the
    translation has broadcasts of its own: a fused bias, a mod's sign test)."""
    if not translated(model):  # its IR is of ONNX ops already
        return model
    from .errors import CheckUnavailable
    from .exporters.as_onnx import to_onnx
    from .kinds.onnx.importer import import_model
    from .target_passes import legalize_for

    purpose = purpose or f"emit {spec.dialect} (made from its ONNX form)"
    try:
        proto = to_onnx(model, results)
    except CheckUnavailable as e:
        where = f"{model.source}: " if model.source else ""
        raise BadInput(f"{where}cannot {purpose}: {e}") from None
    onnx_ir = import_model(proto, model.base_dir)
    legalize_for(onnx_ir, spec, level=level)
    return onnx_ir


def onnx_op_form(model: Model, formats: List[str], spec: Target, level: Optional[str] = None) -> Optional[OnnxForm]:
    """The one ONNX-op form of a model of another format (TFLite) that ``formats`` write
    from (``--emit onnx``, the MLIR formats), legalized for the target ``spec``; None
    where none of them is asked for, or the model is of ONNX ops already. BadInput
    naming every op without an ONNX form."""
    if not translated(model) or not any(f in MLIR_FORMATS or f in ONNX_FORMS for f in formats):
        return None
    from .exporters.as_onnx import to_onnx

    mlir = [f for f in formats if f in MLIR_FORMATS]
    purpose = f"emit {spec.dialect} (made from its ONNX form)" if mlir else "write it as ONNX"
    results: dict = {}
    ir = _as_onnx_ir(model, spec, level, purpose, results)
    proto = to_onnx(ir)
    made = {name for node in proto.graph.node for name in node.output}
    return OnnxForm(ir, proto, {name: v for name, v in results.items() if name in made})


def mlir_sources(model: Model, formats: List[str], level: Optional[str] = None) -> Dict[str, Model]:
    """Per target whose MLIR formats are asked for, the ONNX-op IR its emitters read,
    made once (``_as_onnx_ir``; a TFLite model's ONNX form legalized for that target,
    within ``level``) and shared by them: the emitters themselves legalize nothing."""
    targets = dict.fromkeys(TARGET_OF_DIALECT[f] for f in formats if f in MLIR_FORMATS)
    if not translated(model):  # its IR is of ONNX ops already (no target looked up for it)
        return {t: model for t in targets}
    return {t: _as_onnx_ir(model, target_named(t), level) for t in targets}


@contextmanager
def bound_dims(model: Model, dims: Optional[Dict[str, int]]) -> Iterator[Model]:
    """``model`` (ONNX frontend) with its symbolic dims bound to the sizes of ``dims``
    while the block runs, for an emitter that needs static shapes (TOSA's convolutions):
    the IR's own values are retyped, in place, and their types given back after. Each
    takes the type that one ONNX shape inference of the model's form finds with the
    inputs' dims bound (what it makes static), its own type with the dims bound where
    inference finds less (``_refined``), and the ranks the IR's rules fix where neither
    has one. Nothing is read back into an IR. ``model`` as it is if ``dims`` binds
    nothing."""
    if not dims:
        yield model
        return
    from .shapes.ranks import infer_ranks

    graph = model.graph
    found = _inferred_with(model, dims) if graph.frontend == "onnx" and not translated(model) else {}
    saved = [(v, v.type) for sub in graph.graphs() for n in sub.unordered_nodes() for v in n.outputs
             if v is not None]
    try:
        for v, old in saved:
            n = v.producer
            t = _with_dims(old, dims)
            if n is not None and n.graph is graph and (n.kind == OP or (n.kind == INPUT and n.data is None)):
                t = _refined(found.get(v.name), t)
            v.type = t
        infer_ranks(graph)  # a value neither typed has the rank its op fixes, as an import gives it
        yield model
    finally:
        for v, old in saved:
            v.type = old


def _inferred_with(model: Model, dims: Dict[str, int]) -> Dict[str, TensorType]:
    """The types one ONNX shape inference of ``model``'s form finds with the dims of
    its inputs that ``dims`` names bound (``kinds.onnx.importer.inferred_types``)."""
    from .exporters.as_onnx import to_onnx
    from .kinds.onnx.importer import inferred_types

    proto = to_onnx(model)
    g = proto.graph
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param":
                if d.dim_param in dims:
                    d.dim_value = int(dims[d.dim_param])
                elif vi in g.output:  # inference says what it is, with the inputs bound
                    d.ClearField("dim_param")
    del g.value_info[:]  # the types legalize gave the values are what inference redoes
    return inferred_types(proto)


def _with_dims(t: TensorType, dims: Dict[str, int]) -> TensorType:
    """``t`` with each symbolic dim that ``dims`` binds given its size."""
    if t.shape is None or not any(isinstance(d, str) and d in dims for d in t.shape):
        return t
    return t.with_shape(tuple(int(dims[d]) if isinstance(d, str) and d in dims else d for d in t.shape))


def _refined(inferred: Optional[TensorType], own: TensorType) -> TensorType:
    """A value's type under bound dims: what inference found, each dim it leaves
    unknown (or symbolic) taken from the value's own type where that one is a size."""
    if inferred is None:
        return own
    if inferred.shape is None or own.shape is None or len(inferred.shape) != len(own.shape):
        shape = inferred.shape if inferred.shape is not None else own.shape
    else:
        shape = tuple(i if isinstance(i, int) or not isinstance(o, int) else o
                      for i, o in zip(inferred.shape, own.shape))
    return TensorType(inferred.dtype or own.dtype, shape)


def _emitters() -> Dict[str, Callable[[Model, Dict[str, int]], Union[str, bytes]]]:
    """Each MLIR format's emitter, of the ONNX-op IR ``mlir_sources`` made for it."""
    def stablehlo(ir: Model, dims: Dict[str, int]) -> str:
        from .exporters.stablehlo import emit_stablehlo

        # asserts the runtime constraints legalize recorded on the model (a TFLite
        # model's: those of its ONNX form, legalized again under its own names)
        return emit_stablehlo(ir)

    def tosa(ir: Model, dims: Dict[str, int]) -> str:
        from .exporters.tosa import emit_tosa

        with bound_dims(ir, dims):
            return emit_tosa(ir)

    def stablehlo_bytecode(ir: Model, dims: Dict[str, int]) -> bytes:
        from .exporters.stablehlo import portable_artifact

        return portable_artifact(stablehlo(ir, dims))

    return {"stablehlo": stablehlo, "stablehlo-bytecode": stablehlo_bytecode, "tosa": tosa}


MLIR_FORMATS = tuple(_emitters())  # the --emit formats written by an MLIR emitter


def render_mlir(model: Model, formats: List[str], dims: Optional[Dict[str, int]] = None,
                level: Optional[str] = None, sources: Optional[Dict[str, Model]] = None) -> Dict[str, Union[str, bytes]]:
    """The MLIR text (bytes for bytecode) of each MLIR format asked for (BadInput if an op
    cannot be emitted). ``dims`` binds symbolic dims where the dialect needs static shapes
    (TOSA convs); ``sources``, the IR each target's emitters read (by default
    ``mlir_sources`` of ``model`` within ``level``, the TOSA level a TFLite model's ONNX
    form is folded within)."""
    if sources is None:
        sources = mlir_sources(model, formats, level)
    emitters = _emitters()
    return {f: emitters[f](sources[TARGET_OF_DIALECT[f]], dict(dims or {})) for f in formats if f in emitters}


def render(model: Model, formats: List[str], native: str, dims: Optional[Dict[str, int]] = None,
           level: Optional[str] = None, sources: Optional[Dict[str, Model]] = None,
           form: Optional[OnnxForm] = None) -> Dict[str, object]:
    """Every format asked for but the model's own (``native``): the MLIR texts (of
    ``sources``, as ``render_mlir``), and a TFLite model's ONNX form (a ModelProto: that
    of ``form``, the legalized form the check runs, when given), all made before
    anything is written."""
    made: Dict[str, object] = dict(render_mlir(model, formats, dims, level, sources))
    made.update({f: form.proto if form is not None else onnx_form(model)
                 for f in formats if f in ONNX_FORMS and f != native})
    return made


ONNX_FORMS = ("onnx",)  # the --emit formats that are a model's ONNX form


def level_diagnostics(model: Model, made: Dict[str, object], spec: Target, level: Optional[str] = None):
    """The ``VerifyResult`` of the level check: each tensor of an MLIR text of ``made``
    over the limits of the target ``spec``'s level (TOSA's ``8k`` by default) - a graph
    input or output by its name, another by its op and SSA name - worded as tosa-opt's
    ``failed level check``. Empty when the target has no levels or no text was made."""
    from .exporters.tosa_level import level_violations
    from .verifier import Diagnostic, VerifyResult

    out = VerifyResult()
    lv = spec.level(level)
    if lv is None:
        return out
    # emit_tosa names the arguments %arg0.. in the order of the inputs that are not initializers
    names = {f"%arg{i}": n.outputs[0].name for i, n in enumerate(n for n in model.graph.inputs if n.data is None)}
    for fmt, text in made.items():
        if fmt not in spec.dialects or not isinstance(text, str):
            continue
        for v in level_violations(text, lv):
            if v.op == "func.func":
                what, node = "graph input", names.get(v.tensor, v.tensor)
            elif v.op == "return":
                what, node = "graph output", v.tensor.lstrip("%")
            elif v.op == "block":
                what, node = "block argument", v.tensor.lstrip("%")
            else:
                what, node = f"'{v.op}' value", v.tensor.lstrip("%")
            bound = f"2**{v.bound}" if v.limit == "MAX_LOG2_SIZE" else str(v.bound)
            typed = f" ({v.type})" if v.type else ""
            msg = (f"failed level check: {what} '{node}'{typed} has {v.detail}, over {v.limit} = {bound}"
                   f" of TOSA level {lv.title}")
            out.violations.append(Diagnostic("tosa-level", node, v.op, msg, [], None, stage="output"))
    return out


def check_paths(paths: Dict[str, Path], *, force: bool, protect: Optional[Path]) -> None:
    for p in paths.values():
        check_output_path(p, force=force, protect=protect)


def write_extra(paths: Dict[str, Path], made: Dict[str, object], native: str, *, force: bool,
                protect: Optional[Path]) -> None:
    """Write every format but the native one (which ``api.save`` writes), as ``render``
    made them."""
    import onnx

    for fmt, path in paths.items():
        if fmt == native:
            continue
        data = made[fmt]
        with atomic_output(path, force=force, protect=protect) as tmp:
            if isinstance(data, onnx.ModelProto):
                onnx.save_model(data, str(tmp))
            else:
                tmp.write_bytes(data) if isinstance(data, bytes) else tmp.write_text(data)
