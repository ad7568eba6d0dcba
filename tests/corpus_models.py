"""The real-model corpus, as the tests and scripts/corpus.py both see it: which models it
holds (``corpus()``: Hugging Face architectures, as ONNX and as torch.export programs,
Keras applications, models shipped in wheels, and the TOSA converter's outputs of the
TFLite ones), where they are cached
(``CACHE``), what the main job needs for some of them (``CHECK_NEEDS``, ``AGAINST_NEEDS``)
and how one model is run (``legalize_row``, ``against_row``: ``legalize`` in a process of
its own, its JSON report read back).

scripts/corpus.py builds the models (scripts/corpus_hf.py, scripts/corpus_keras.py) and
prints the figures table; tests/test_corpus.py runs each cached model. Standard library
only at import: scripts/corpus_keras.py reads its table from here in TensorFlow's venv.
"""

from __future__ import annotations

import fnmatch
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "corpus"
TARGETS = ("tosa", "xla")

# ---- Hugging Face: architectures from small configs (random weights) ---------------
VOCAB = 128
TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=128)
# Decoders: 4 query heads over 2 key/value heads (grouped-query attention) where the
# architecture has them.
GQA = dict(TEXT, num_key_value_heads=2)
IMAGE = dict(image_size=32, num_channels=3)


@dataclass
class Spec:
    """A ``transformers`` architecture of the corpus (scripts/corpus_hf.py exports it)."""
    cls: str  # the transformers model class
    config: str  # its config class
    kind: str  # text | decoder | image | audio | features
    kwargs: Dict = field(default_factory=dict)
    output: str = "last_hidden_state"  # the attribute of the model's output exported
    side: int = 32  # image side / audio samples / feature frames traced


HF_MODELS: Dict[str, Spec] = {
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

# ---- torch.export programs (issue 33): architectures with rank-6 views --------------
# Small configs, random weights, the batch dynamic (1..8), saved by torch.export.save
# (scripts/corpus_hf.py's ``export_program``); legalized for Core ML's rank limit, and
# their legal form converted by coremltools and run on ExecuTorch (XNNPACK).
WINDOWS = dict(patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2)
PT2_MODELS: Dict[str, Spec] = {
    # Swin's window partition and reverse: rank-6 views and permutes, and a relative bias
    "pt2_swin": Spec("SwinModel", "SwinConfig", "image", dict(IMAGE, **WINDOWS)),
    # Swin V2: the same windows, with cosine attention and a continuous position bias
    "pt2_swinv2": Spec("Swinv2Model", "Swinv2Config", "image", dict(IMAGE, **WINDOWS)),
    # CLAP's audio encoder (HTSAT): Swin windows over a one-channel spectrogram
    "pt2_clap_audio": Spec("ClapAudioModel", "ClapAudioConfig", "spectrogram",
                           dict(window_size=4, num_mel_bins=32, spec_size=32, patch_size=4, patch_stride=(4, 4),
                                hidden_size=32, depths=[1, 1], num_attention_heads=[2, 2],
                                patch_embeds_hidden_size=16, num_hidden_layers=2)),
}
# What a .pt2 of the corpus is legalized for (the others: TARGETS).
PT2_TARGETS = ("coreml",)


def targets_of(path: Path) -> Tuple[str, ...]:
    return PT2_TARGETS if path.suffix == ".pt2" else TARGETS


# ---- Keras applications, converted by TensorFlow's TFLiteConverter ------------------
# application -> the input side. 64 where the application allows it (its minimum is 32):
# small enough that conversion and the check take seconds, large enough that every
# downsampling stage keeps a spatial dim.
KERAS_APPLICATIONS = {
    "MobileNetV2": 64,
    "MobileNetV3Small": 64,
    "MobileNetV3Large": 64,
    "EfficientNetB0": 64,
    "ResNet50": 64,
    "DenseNet121": 64,
    "NASNetMobile": 64,
    "ConvNeXtTiny": 64,
}


# ---- models that PyPI packages ship inside their wheels -----------------------------
# package==version -> {corpus name: the model's path inside the wheel}. Versions are
# pinned and the wheel's platform fixed (below), so every machine builds the same corpus.
WHEELS: Dict[str, Dict[str, str]] = {
    "silero-vad==6.2.3": {
        "wheel_silero_vad": "silero_vad/data/silero_vad.onnx",
        "wheel_silero_vad_16k_op15": "silero_vad/data/silero_vad_16k_op15.onnx",
        "wheel_silero_vad_half": "silero_vad/data/silero_vad_half.onnx",
        "wheel_silero_vad_op18_ifless": "silero_vad/data/silero_vad_op18_ifless.onnx",
    },
    "faster-whisper==1.2.1": {"wheel_faster_whisper_silero_vad_v6": "faster_whisper/assets/silero_vad_v6.onnx"},
    "magika==1.0.3": {"wheel_magika": "magika/models/standard_v3_3/model.onnx"},
    "rapidocr==3.10.0": {
        "wheel_rapidocr_cls": "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
        "wheel_rapidocr_det": "rapidocr/models/PP-OCRv6_det_small.onnx",
        "wheel_rapidocr_rec": "rapidocr/models/PP-OCRv6_rec_small.onnx",
    },
    # the PaddleOCR v4 recognizer at opset 12, below what its legal form needs (issue 32)
    "rapidocr-onnxruntime==1.4.4": {
        "wheel_rapidocr_v4_rec_op12": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"},
    "nudenet==3.4.2": {"wheel_nudenet_320n": "nudenet/320n.onnx"},
    "mediapipe==0.10.21": {
        f"wheel_mediapipe_{Path(p).stem}": f"mediapipe/modules/{p}" for p in (
            "face_detection/face_detection_short_range.tflite",
            "face_detection/face_detection_full_range_sparse.tflite",
            "face_landmark/face_landmark.tflite",
            "face_landmark/face_landmark_with_attention.tflite",
            "hand_landmark/hand_landmark_lite.tflite",
            "hand_landmark/hand_landmark_full.tflite",
            "holistic_landmark/hand_recrop.tflite",
            "iris_landmark/iris_landmark.tflite",
            "palm_detection/palm_detection_lite.tflite",
            "palm_detection/palm_detection_full.tflite",
            "pose_detection/pose_detection.tflite",
            "pose_landmark/pose_landmark_full.tflite",
            "selfie_segmentation/selfie_segmentation.tflite",
            "selfie_segmentation/selfie_segmentation_landscape.tflite",
        )},
}


# ---- the corpus -----------------------------------------------------------------------
def keras_name(application: str, int8: bool) -> str:
    """The corpus name of a Keras application's float or int8 conversion."""
    return f"keras_{application.lower()}{'_int8' if int8 else ''}"


# The converter's outputs: TOSA bytecode of each TFLite model of the corpus.
CONVERTED = "tosa_"


def corpus() -> Dict[str, str]:
    """Every corpus model's name -> its file's suffix, in build order."""
    names = {n: ".onnx" for n in HF_MODELS}
    names.update({n: ".pt2" for n in PT2_MODELS})
    names.update({keras_name(a, int8): ".tflite" for a in KERAS_APPLICATIONS for int8 in (False, True)})
    for models in WHEELS.values():
        names.update({n: Path(p).suffix for n, p in models.items()})
    names.update({f"{CONVERTED}{n}": ".mlirbc" for n, suffix in list(names.items()) if suffix == ".tflite"})
    return names


# The default run's sample (the whole corpus is ``-m slow``): a transformer, an int8
# TFLite network, and Silero VAD's opset-15 export, whose LSTM state is squeezed in one
# branch of nested Ifs and not in the other: its rank is unknown until inferred backwards
# from the declared rank-3 result of Add(state, a scalar) (shapes/ranks._from_results).
SAMPLE = ("hf_bert", "keras_mobilenetv2_int8", "wheel_silero_vad_16k_op15",
          "tosa_wheel_mediapipe_hand_landmark_lite",  # and one converter output, --against its .tflite
          "pt2_swin")  # and a torch.export program, for coreml
# Every corpus model the default run reads: the sample, and those that other tests
# read (each skips, naming its model, where it is not built): the Ray batch's
# (test_ray_batch), the float models the integer-only targets refuse
# (test_deploy_verdict), rapidocr's opset-12 recognizer (test_old_opsets) and
# classifier (test_unnamed_dims). ``scripts/corpus.py --default-run`` builds just
# these, as CI does.
DEFAULT_RUN = SAMPLE + ("hf_resnet", "hf_vit", "keras_mobilenetv2", "wheel_mediapipe_face_detection_short_range",
                        "wheel_rapidocr_det", "wheel_rapidocr_v4_rec_op12", "wheel_rapidocr_cls")


def source_of(name: str) -> Optional[str]:
    """The TFLite model a converter output (``tosa_<name>``) was converted from, else None."""
    return name[len(CONVERTED):] if name.startswith(CONVERTED) else None


def select(only: Iterable[str]) -> List[str]:
    """The corpus names matching any of the ``--only`` patterns (fnmatch, or a plain
    substring); all of them with none."""
    only = list(only)
    names = list(corpus())
    if not only:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, p) or p in n for p in only)]


def model_path(name: str, cache: Path = CACHE) -> Path:
    return cache / f"{name}{corpus()[name]}"


def cached(cache: Path = CACHE, names: Optional[Iterable[str]] = None) -> List[Path]:
    """The corpus models built in ``cache`` (model file and manifest both there)."""
    if not cache.is_dir():
        return []
    return [model_path(n, cache) for n in (select([]) if names is None else names)
            if model_path(n, cache).is_file() and (cache / f"{n}.json").is_file()]


# ---- one model's run ------------------------------------------------------------------
def legalize_row(path: Path, target: str, out_dir: Path, extra: Iterable[str] = ()) -> dict:
    """Run the main job (``legalize MODEL --target T``, with the check) in a process of
    its own and read its JSON report: the exit code, the counts, and whether the check
    ran fully and matched."""
    out = out_dir / f"{path.stem}.{target}.legal{path.suffix}"
    report = out_dir / f"{path.stem}.{target}.json"
    from helpers import cli_process

    t0 = time.perf_counter()
    proc = cli_process(path, out, "--target", target, "--force", "-q", "--report", report, *extra, timeout=None)
    row = {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
           "stderr": proc.stderr.strip()}
    try:
        rep = json.loads(report.read_text())
    except (OSError, ValueError):
        return row
    check = rep.get("check") or {}
    ran = [b for b in check.get("bindings", []) if not b.get("skipped")]
    row.update(
        legalized=proc.returncode == 0 and out.exists(),
        reshapes=rep.get("stats", {}).get("reshapes_inserted", 0),
        folded=rep.get("stats", {}).get("constants_folded", 0),
        broadcasts=rep.get("stats", {}).get("broadcasts_made_explicit", 0),
        check_ran=bool(check.get("ran")),
        in_part=bool(check.get("ran")) and bool(check.get("error")),
        matched=bool(check.get("ran")) and bool(check.get("ok")),
        bindings=[b.get("dims", {}) for b in ran],
        tried=len(check.get("bindings", [])),
        searched=(check.get("search") or {}).get("tried", 0),
        warnings=rep.get("warnings", []),
        violations=[v.get("message", "") for v in rep.get("violations", [])],
        error=check.get("error") or rep.get("error") or _first_miss(check))
    if "executorch" in check:  # a .pt2's legal program on ExecuTorch (XNNPACK), where installed
        et = check["executorch"]
        row.update(executorch_ran=bool(et.get("ran")), executorch_matched=bool(et.get("ran")) and bool(et.get("ok")),
                   executorch_error=et.get("error") or _first_miss(et))
    if "target_rules" in rep:
        row["refused_after"] = rep["target_rules"].get("refused_after", [])
    return row


# What ``--against`` is given for a converter output whose comparison with its TFLite
# model needs it, and why. IREE's llvm-cpu kernels and LiteRT's (XNNPACK) differ in
# summation order and in their activations' approximations; through a deep network the
# difference passes the check's default tolerances (rtol 1e-4, atol 1e-5), never these.
KERNELS_DIFFER = "IREE's and LiteRT's kernels differ by up to ~2% through the network's depth"
AGAINST_NEEDS: Dict[str, dict] = {
    "tosa_wheel_mediapipe_palm_detection_lite": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
    "tosa_wheel_mediapipe_palm_detection_full": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
    "tosa_wheel_mediapipe_pose_landmark_full": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
}


def against_row(path: Path, out_dir: Path) -> dict:
    """``legalize M.mlirbc --verify-only --against`` the .tflite it was converted from,
    in a process of its own, and its JSON report: the exit code, the error line (exit 2),
    whether the comparison ran fully and matched, and which results differ."""
    reference = path.with_name(f"{source_of(path.stem)}.tflite")
    report = out_dir / f"{path.stem}.against.json"
    need = AGAINST_NEEDS.get(path.stem, {})
    from helpers import cli_process

    t0 = time.perf_counter()
    proc = cli_process(path, "--verify-only", "--against", reference, "-q", "--report", report,
                       *(a for k in ("rtol", "atol") if k in need for a in (f"--{k}", str(need[k]))), timeout=None)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("legalize: ")]  # not the runtimes' INFO lines
    row = {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1), "error": errors,
           "stdout": proc.stdout.strip(), "reference": reference.name}
    try:
        check = json.loads(report.read_text()).get("check") or {}
    except (OSError, ValueError):
        return row
    row.update(ran=bool(check.get("ran")) and not check.get("error"), matched=bool(check.get("ok")),
               provider=check.get("provider"),
               differ=sorted({o["name"] for b in check.get("bindings", []) for o in b.get("outputs", [])
                              if not o["ok"]}))
    return row


def _first_miss(check: dict) -> Optional[str]:
    """The first output that differs, as the check words it."""
    for b in check.get("bindings", []):
        for o in b.get("outputs", []):
            if not o["ok"]:
                return f"{o['name']}: {o.get('detail') or 'max abs err %.3g, max rel err %.3g' % (o['max_abs_err'], o['max_rel_err'])}"
    return None


# Models whose original runs only at values the check would not synthesize: what the
# main job is given for them, and why. Each is what the model truly needs, not a way
# around a failure of legalize. Sizes are not given where the check's binding search
# finds them (the audio encoders' sample counts, silero-vad's windows, the sides of
# rapidocr's detector and nudenet): the table shows what it found.
SILERO_SR = "a sample rate its If accepts (16 kHz)"
CHECK_NEEDS: Dict[str, dict] = {
    "wheel_silero_vad": {"inputs": {"sr": 16000}, "why": SILERO_SR},
    "wheel_silero_vad_16k_op15": {"inputs": {"sr": 16000}, "why": SILERO_SR},
    "wheel_silero_vad_op18_ifless": {"inputs": {"sr": 16000}, "why": SILERO_SR},
}


def check_options(path: Path, work: Path) -> List[str]:
    """The main job's extra options for the model at ``path`` (CHECK_NEEDS): ``--dim``
    for each size, ``--input`` with an .npy written into ``work`` for each value."""
    need = CHECK_NEEDS.get(path.stem, {})
    args = []
    for dim, size in need.get("dims", {}).items():
        args += ["--dim", f"{dim}={size}"]
    for name, value in need.get("inputs", {}).items():
        import numpy as np

        npy = work / f"{path.stem}.{name}.npy"
        np.save(npy, np.asarray(value, np.int64))
        args += ["--input", f"{name}={npy}"]
    return args
