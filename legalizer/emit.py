"""``--emit``: the formats a legalized model is written in, besides (or instead of) its
own. Each is written beside the output's stem (``m.legal.onnx`` -> ``m.legal.tosa.mlir``).

MLIR is made before anything is written, so a model with an op that cannot be
emitted fails with nothing on disk; files are written only after the check passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

from .errors import UsageError
from .fileio import atomic_output, check_output_path
from .model import Model

FORMATS = ("onnx", "tflite", "stablehlo", "stablehlo-bytecode", "tosa")
SUFFIX = {"onnx": ".onnx", "tflite": ".tflite", "stablehlo": ".stablehlo.mlir",
          "stablehlo-bytecode": ".stablehlo.mlirbc", "tosa": ".tosa.mlir"}
# The legal form each MLIR dialect takes: StableHLO broadcasts only explicitly, TOSA
# only through size-1 dims of equal-rank operands.
NEEDS_TARGET = {"stablehlo": "xla", "stablehlo-bytecode": "xla", "tosa": "tosa"}


def emit_paths(output: Path, formats: List[str], native: str) -> Dict[str, Path]:
    """Where each format goes: the native one at ``output``, the others beside its stem."""
    stem = output.with_suffix("") if output.suffix == SUFFIX.get(native) else output
    return {f: output if f == native else Path(f"{stem}{SUFFIX[f]}") for f in formats}


def validate(formats: List[str], model_format: str, target: str) -> List[str]:
    """The formats to write (default: the input's), or UsageError."""
    formats = list(dict.fromkeys(formats)) or [model_format]
    for f in formats:
        if f not in FORMATS:
            raise UsageError(f"--emit must be one of {', '.join(FORMATS)}, not '{f}'")
        if f == "tflite" and model_format != "tflite":
            raise UsageError("--emit tflite: only a TFLite model can be written as .tflite")
        need = NEEDS_TARGET.get(f)
        if need is not None and target != need:
            raise UsageError(f"--emit {f} writes the {need} form: add --target {need}")
    return formats


def _as_onnx_ir(model: Model, target: str) -> Model:
    """The ONNX-op IR the MLIR emitters read: a TFLite model goes through its ONNX form,
    legalized again (the translation has broadcasts of its own: a fused bias, a mod's
    sign test)."""
    if model.format == "onnx":
        return model
    from .api import to_onnx
    from .importers.onnx import import_model
    from .transform import legalize

    onnx_ir = import_model(to_onnx(model))
    legalize(onnx_ir, target)
    return onnx_ir


def _emitters() -> Dict[str, Callable[[Model, Dict[str, int]], Union[str, bytes]]]:
    def stablehlo(m: Model, dims: Dict[str, int]) -> str:
        from .exporters.stablehlo import emit_stablehlo

        return emit_stablehlo(_as_onnx_ir(m, NEEDS_TARGET["stablehlo"]))

    def tosa(m: Model, dims: Dict[str, int]) -> str:
        from .exporters.tosa import emit_tosa

        return emit_tosa(_as_onnx_ir(m, NEEDS_TARGET["tosa"]), dims=dims or None)

    def stablehlo_bytecode(m: Model, dims: Dict[str, int]) -> bytes:
        from .exporters.stablehlo import portable_artifact

        return portable_artifact(stablehlo(m, dims))

    return {"stablehlo": stablehlo, "stablehlo-bytecode": stablehlo_bytecode, "tosa": tosa}


def render_mlir(model: Model, formats: List[str], dims: Optional[Dict[str, int]] = None) -> Dict[str, Union[str, bytes]]:
    """The MLIR text (bytes for bytecode) of each MLIR format asked for (BadInput if an op
    cannot be emitted). ``dims`` binds symbolic dims where the dialect needs static shapes
    (TOSA convs)."""
    emitters = _emitters()
    return {f: emitters[f](model, dict(dims or {})) for f in formats if f in emitters}


def check_paths(paths: Dict[str, Path], *, force: bool, protect: Optional[Path]) -> None:
    for p in paths.values():
        check_output_path(p, force=force, protect=protect)


def write_extra(model: Model, paths: Dict[str, Path], texts: Dict[str, str], native: str, *, force: bool,
                protect: Optional[Path]) -> None:
    """Write every format but the native one (which ``api.save`` writes)."""
    for fmt, path in paths.items():
        if fmt == native:
            continue
        if fmt in texts:
            with atomic_output(path, force=force, protect=protect) as tmp:
                data = texts[fmt]
                tmp.write_bytes(data) if isinstance(data, bytes) else tmp.write_text(data)
        elif fmt == "onnx":  # a TFLite model's ONNX form
            import onnx

            from .api import to_onnx

            with atomic_output(path, force=force, protect=protect) as tmp:
                onnx.save_model(to_onnx(model), str(tmp))
