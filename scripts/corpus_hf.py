"""The Hugging Face part of the corpus (scripts/corpus.py): ``transformers``
architectures built from small configs (a few layers, small widths, random weights:
nothing is downloaded) and exported with ``torch.onnx.export(..., dynamo=True)``, batch
and sequence (or time) dims symbolic; and those of PT2_MODELS as ``torch.export``
programs (``export_program``: ``torch.export.save``'s ``.pt2``, the batch dynamic).

Each entry of MODELS (tests/corpus_models.py's HF_MODELS) names the model class, its
config's arguments, and the kind of input it takes; ``export(name, path)`` writes the
ONNX file and returns the manifest's ``dims`` (the symbolic dims and the sizes the
export traced).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))
# The table of architectures: tests/corpus_models.py (the tests list the corpus from it).
from corpus_models import HF_MODELS as MODELS, PT2_MODELS, VOCAB, Spec  # noqa: E402


def _module(spec: Spec):
    import torch
    import transformers

    config = getattr(transformers, spec.config)(**spec.kwargs)
    config.use_cache = False
    torch.manual_seed(0)
    if spec.cls == "WhisperEncoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder as cls
    else:
        cls = getattr(transformers, spec.cls)
    return cls(config).eval()


def _example(spec: Spec):
    """The traced inputs, their ONNX names, their torch.export dynamic dims, and the
    manifest's account of them."""
    import torch

    batch = torch.export.Dim("batch", min=1, max=64)
    if spec.kind in ("text", "decoder"):
        seq = torch.export.Dim("seq", min=1, max=64)
        ids = torch.randint(1, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
        mask = torch.ones(2, 8, dtype=torch.int64)
        return ((ids, mask), ["input_ids", "attention_mask"], ({0: batch, 1: seq}, {0: batch, 1: seq}),
                {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]})
    if spec.kind == "image":
        x = torch.randn(2, 3, spec.side, spec.side)
        return (x,), ["pixel_values"], ({0: batch},), {"pixel_values": ["batch", 3, spec.side, spec.side]}
    if spec.kind == "audio":
        time = torch.export.Dim("time", min=400, max=32000)
        x = torch.randn(2, spec.side)
        return (x,), ["input_values"], ({0: batch, 1: time},), {"input_values": ["batch", "time"]}
    # features: Whisper's encoder takes exactly 2 * max_source_positions frames
    mels = spec.kwargs["num_mel_bins"]
    x = torch.randn(2, mels, spec.side)
    return (x,), ["input_features"], ({0: batch},), {"input_features": ["batch", mels, spec.side]}


def _head(model, names, output):
    """The model's forward with plain tensors in (one or two, in ``names`` order) and
    the one exported tensor out."""
    import torch

    def pick(out):
        return out[0] if isinstance(out, tuple) else getattr(out, output)

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return pick(self.model(**{names[0]: x}))

    class Two(One):
        def forward(self, x, y):
            return pick(self.model(**{names[0]: x, names[1]: y}))

    return (One if len(names) == 1 else Two)().eval()


def export_program(name: str, path) -> Tuple[dict, dict]:
    """Export PT2_MODELS[name] with ``torch.export.export`` (its batch dynamic) and save it
    to ``path`` (``torch.export.save``); (dims, versions) for the manifest."""
    import torch
    import transformers

    spec = PT2_MODELS[name]
    channels = spec.kwargs.get("num_channels", 1)  # a spectrogram: one channel
    x = torch.randn(2, channels, spec.side, spec.side, generator=torch.Generator().manual_seed(0))
    head = _head(_module(spec), ["input_features" if spec.kind == "spectrogram" else "pixel_values"], spec.output)
    batch = torch.export.Dim("batch", min=1, max=8)
    # (not under no_grad: its linear layers then export as expand + bmm, which the legal
    # form keeps and ExecuTorch's XNNPACK linear pass misreads once reordered)
    program = torch.export.export(head, (x,), dynamic_shapes=({0: batch},), strict=False)
    torch.export.save(program, str(path))
    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    return {"inputs": {"x": ["batch", channels, spec.side, spec.side]}, "architecture": spec.cls,
            "traced_batch": 2}, versions


def export(name: str, path) -> Tuple[dict, dict]:
    """Export MODELS[name] to ``path``; (dims, versions) for the manifest."""
    import onnxscript
    import torch
    import transformers

    spec = MODELS[name]
    args, names, dynamic, dims = _example(spec)
    head = _head(_module(spec), names, spec.output)
    with torch.no_grad():
        program = torch.onnx.export(head, args, dynamic_shapes=dynamic, dynamo=True, input_names=names,
                                    output_names=[spec.output], verbose=False)
    program.save(str(path))
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "onnxscript": onnxscript.__version__}
    return {"inputs": dims, "architecture": spec.cls, "traced_batch": 2}, versions
