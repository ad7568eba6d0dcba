"""The Hugging Face part of the corpus (scripts/corpus.py): ``transformers``
architectures built from small configs (a few layers, small widths, random weights:
nothing is downloaded) and exported with ``torch.onnx.export(..., dynamo=True)``, batch
and sequence (or time) dims symbolic.

Each entry of MODELS names the model class, its config's arguments, and the kind of
input it takes; ``export(name, path)`` writes the ONNX file and returns the manifest's
``dims`` (the symbolic dims and the sizes the export traced).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Tuple

VOCAB = 128
TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=128)
# Decoders: 4 query heads over 2 key/value heads (grouped-query attention) where the
# architecture has them.
GQA = dict(TEXT, num_key_value_heads=2)
IMAGE = dict(image_size=32, num_channels=3)


@dataclass
class Spec:
    cls: str  # the transformers model class
    config: str  # its config class
    kind: str  # text | decoder | image | audio | features
    kwargs: Dict = field(default_factory=dict)
    output: str = "last_hidden_state"  # the attribute of the model's output exported
    side: int = 32  # image side / audio samples / feature frames traced


MODELS: Dict[str, Spec] = {
    # encoders
    "hf_bert": Spec("BertModel", "BertConfig", "text", TEXT),
    "hf_roberta": Spec("RobertaModel", "RobertaConfig", "text", dict(TEXT, pad_token_id=1)),
    "hf_distilbert": Spec("DistilBertModel", "DistilBertConfig", "text",
                          dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                               max_position_embeddings=128)),
    "hf_albert": Spec("AlbertModel", "AlbertConfig", "text", dict(TEXT, embedding_size=16)),
    "hf_electra": Spec("ElectraModel", "ElectraConfig", "text", dict(TEXT, embedding_size=16)),
    "hf_deberta_v2": Spec("DebertaV2Model", "DebertaV2Config", "text",
                          dict(TEXT, relative_attention=True, position_buckets=16,
                               pos_att_type=["p2c", "c2p"])),
    "hf_mpnet": Spec("MPNetModel", "MPNetConfig", "text", TEXT),
    "hf_xlm_roberta": Spec("XLMRobertaModel", "XLMRobertaConfig", "text", dict(TEXT, pad_token_id=1)),
    # decoders (forward without a KV cache)
    "hf_gpt2": Spec("GPT2Model", "GPT2Config", "decoder",
                    dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "hf_llama": Spec("LlamaModel", "LlamaConfig", "decoder", GQA),
    "hf_mistral": Spec("MistralModel", "MistralConfig", "decoder", dict(GQA, sliding_window=16)),
    "hf_qwen2": Spec("Qwen2Model", "Qwen2Config", "decoder", GQA),
    "hf_gemma": Spec("GemmaModel", "GemmaConfig", "decoder", dict(GQA, num_key_value_heads=1, head_dim=8)),
    "hf_phi3": Spec("Phi3Model", "Phi3Config", "decoder", dict(GQA, pad_token_id=0)),
    "hf_qwen3": Spec("Qwen3Model", "Qwen3Config", "decoder", dict(GQA, head_dim=8)),
    # vision: transformers and conv nets
    "hf_vit": Spec("ViTModel", "ViTConfig", "image", dict(IMAGE, **TEXT, patch_size=8)),
    "hf_deit": Spec("DeiTModel", "DeiTConfig", "image", dict(IMAGE, **TEXT, patch_size=8)),
    "hf_swin": Spec("SwinModel", "SwinConfig", "image",
                    dict(IMAGE, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4)),
    "hf_convnext": Spec("ConvNextModel", "ConvNextConfig", "image",
                        dict(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1])),
    "hf_resnet": Spec("ResNetModel", "ResNetConfig", "image",
                      dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
    "hf_mobilenet_v2": Spec("MobileNetV2Model", "MobileNetV2Config", "image",
                            dict(IMAGE, depth_multiplier=0.25)),
    "hf_efficientnet": Spec("EfficientNetModel", "EfficientNetConfig", "image",
                            dict(IMAGE, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320)),
    "hf_dinov2": Spec("Dinov2Model", "Dinov2Config", "image", dict(IMAGE, **TEXT, patch_size=8)),
    # audio
    "hf_wav2vec2": Spec("Wav2Vec2Model", "Wav2Vec2Config", "audio",
                        dict(TEXT, conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), side=1600),
    "hf_hubert": Spec("HubertModel", "HubertConfig", "audio",
                      dict(TEXT, conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), side=1600),
    "hf_whisper_encoder": Spec("WhisperEncoder", "WhisperConfig", "features",
                               dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, encoder_attention_heads=4,
                                    encoder_ffn_dim=64, decoder_layers=1, decoder_attention_heads=4,
                                    decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=32), side=64),
}


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
