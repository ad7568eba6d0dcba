"""The small sample models committed in models/: what each is and how it is made
(``scripts/make_models.py`` writes them; the tests build them again from here).

- hand-made with ``onnx.helper`` (``MODELS``: ``mlp_bias``, ``dynamic_broadcast``,
  ``incompatible_add``);
- small PyTorch modules (``_torch_modules``) exported with ``torch.onnx.export``, each
  twice: with the dynamo exporter (``*.dynamo.onnx``: symbolic dims such as ``batch``
  and ``seq`` on the inputs) and with the TorchScript exporter (``*.torchscript.onnx``:
  static shapes); the ``torch`` extra, at the ``PINNED`` versions (another version
  exports other bytes);
- the same modules as ``torch.export`` programs (``*.pt2``, ``save_pt2``);
- the TFLite ones are in tflite_models.py.

The exported models keep their weights inside the ``.onnx`` file. The dynamo exporter
annotates every node with its FX node, name scopes and Python stack trace (file paths
of the machine that ran it); ``strip`` removes those annotations and all doc strings
so that a rerun anywhere gives the same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from legalizer.kinds.pt2.torch_logs import quiet_torch

OPSET = 17


def _model(graph: onnx.GraphProto, opset: int = OPSET) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="legalize/scripts/make_models.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def mlp_bias() -> onnx.ModelProto:
    """Two dense layers with rank-1 biases: [N,16]x[16,32] + [32] - legal under the
    mlir profile, but the bias operands' ranks differ from the result's (tosa)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b2")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="act"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["h4"], name="fc2_bias"),
        helper.make_node("Mul", ["h4", "scale"], ["y"], name="out_scale"),
    ]
    g = helper.make_graph(nodes, "mlp_bias",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                          [w1, b1, w2, b2, scale])
    return _model(g)


def dynamic_broadcast() -> onnx.ModelProto:
    """The RFC's hard cases: <2x?> + <?x?>, <?x2> + <2x?>, symbols N and M. Legal, with
    runtime constraints the report lists."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["ab"], name="add_2xq_qxq"),
        helper.make_node("Mul", ["c", "d"], ["cd"], name="mul_qx2_2xq"),
        helper.make_node("Sub", ["e", "f"], ["y"], name="sub_N_M"),
    ]
    g = helper.make_graph(nodes, "dynamic_broadcast", [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [None, None]),
        helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 2]),
        helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 3]),
        helper.make_tensor_value_info("f", TensorProto.FLOAT, ["M", 1]),
    ], [
        helper.make_tensor_value_info("ab", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("cd", TensorProto.FLOAT, [2, 2]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3]),
    ])
    return _model(g)


def incompatible_add() -> onnx.ModelProto:
    """An Add whose operands cannot broadcast ([3,4] + [2]): a violation, exit 1."""
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], name="bad_add")]
    g = helper.make_graph(nodes, "incompatible_add",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="legalize/scripts/make_models.py")
    m.ir_version = 8
    return m  # onnx.checker's strict shape inference rejects it, as it should


MODELS = {
    "mlp_bias.onnx": mlp_bias,
    "dynamic_broadcast.onnx": dynamic_broadcast,
    "incompatible_add.onnx": incompatible_add,
}


# ---- PyTorch modules, exported with torch.onnx.export --------------------------------
#
# torch is optional: everything below imports it lazily. The modules are small (widths
# 16 to 96) so that each file stays a few tens of KiB.

TORCH_OPSET = 18  # the dynamo exporter's own opset in torch 2.13 (no version conversion)
SEED = 0
# The versions that made the committed files (the ``torch`` extra in pyproject.toml pins
# the same); other versions export other bytes.
PINNED = {"torch": "2.13.0", "onnxscript": "0.7.2"}


def version_mismatch() -> str:
    """'' when the installed torch and onnxscript are the pinned ones, else what differs."""
    from importlib import metadata

    out = []
    for pkg, want in PINNED.items():
        try:
            have = metadata.version(pkg).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
        if have != want:
            out.append(f"{pkg} {have} (pinned {want})")
    return ", ".join(out)


def _torch_modules() -> Dict[str, Tuple[Callable, Callable]]:
    """name -> (make the module, make its example inputs and dynamic shapes)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class TransformerBlock(nn.Module):
        """Pre-LN transformer block: self-attention with a float additive mask [S,S]
        added to the scaled scores [B,H,S,S], an explicit rank-1 bias on the fused QKV
        projection, LayerNorm, a GELU MLP, residuals."""

        def __init__(self, d_model: int = 32, n_heads: int = 2, d_ff: int = 64):
            super().__init__()
            self.n_heads, self.d_head = n_heads, d_model // n_heads
            self.scale = self.d_head ** -0.5
            self.ln1 = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
            self.qkv_bias = nn.Parameter(0.02 * torch.randn(3 * d_model))  # [3D]: x + bias
            self.proj = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model)
            self.fc1 = nn.Linear(d_model, d_ff)
            self.fc2 = nn.Linear(d_ff, d_model)

        def forward(self, x, mask):
            b, s, d = x.shape
            qkv = self.qkv(self.ln1(x)) + self.qkv_bias
            q, k, v = qkv.split(d, dim=-1)
            q, k, v = (t.reshape(b, s, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) * self.scale + mask  # [B,H,S,S] * [] + [S,S]
            o = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(o)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class MLP(nn.Module):
        """Two dense layers: the first without its own bias, followed by an explicit
        ``h + bias`` with a rank-1 parameter (an ONNX Add [N,32] + [32]); the second a
        plain nn.Linear."""

        def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8):
            super().__init__()
            self.fc1 = nn.Linear(d_in, d_hidden, bias=False)
            self.bias = nn.Parameter(0.1 * torch.randn(d_hidden))
            self.fc2 = nn.Linear(d_hidden, d_out)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x) + self.bias))

    class SmallCNN(nn.Module):
        """conv -> per-channel scale [C,1,1] times [N,C,H,W] -> ReLU -> conv -> ReLU ->
        global average pool -> linear."""

        def __init__(self, c_in: int = 3, c: int = 8, n_classes: int = 4):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c, 3, padding=1)
            self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(c, 1, 1))
            self.conv2 = nn.Conv2d(c, c, 3, padding=1)
            self.fc = nn.Linear(c, n_classes)

        def forward(self, x):
            h = torch.relu(self.conv1(x) * self.scale)
            h = torch.relu(self.conv2(h))
            return self.fc(h.mean(dim=(2, 3)))

    def transformer_inputs():
        Dim = torch.export.Dim
        batch, seq = Dim("batch"), Dim("seq")
        s = 5
        x = torch.randn(2, s, 32)
        mask = torch.triu(torch.full((s, s), -1e4), diagonal=1)  # causal, additive
        return (x, mask), ["x", "mask"], {"x": {0: batch, 1: seq}, "mask": {0: seq, 1: seq}}

    def mlp_inputs():
        return (torch.randn(4, 16),), ["x"], {"x": {0: torch.export.Dim("batch")}}

    def cnn_inputs():
        Dim = torch.export.Dim
        return ((torch.randn(2, 3, 8, 8),), ["x"],
                {"x": {0: Dim("batch"), 2: Dim("height"), 3: Dim("width")}})

    # torch.export writes each module's class as "<module>.<qualified name>" into the
    # .pt2 files; those committed were made when these classes lived in the script run
    # as __main__, so they are named so still (a rerun gives the same bytes).
    for cls in (TransformerBlock, MLP, SmallCNN):
        cls.__module__ = "__main__"
    return {
        "transformer_block": (TransformerBlock, transformer_inputs),
        "mlp": (MLP, mlp_inputs),
        "small_cnn": (SmallCNN, cnn_inputs),
    }


TORCH_MODELS = [f"{name}.{exporter}.onnx"
                for name in ("transformer_block", "mlp", "small_cnn")
                for exporter in ("dynamo", "torchscript")]


def strip(m: onnx.ModelProto) -> onnx.ModelProto:
    """Drop what differs from one run or machine to the next: the exporter's per-node
    annotations (FX node, name scopes, stack traces with file paths) and doc strings."""
    def clear(*protos) -> None:
        for p in protos:
            p.doc_string = ""
            del p.metadata_props[:]

    def nodes(ns) -> None:
        for n in ns:
            clear(n)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)

    def graph(g: onnx.GraphProto) -> None:
        clear(g, *g.input, *g.output, *g.value_info, *g.initializer)
        nodes(g.node)

    clear(m)
    graph(m.graph)
    for f in m.functions:
        clear(f)
        nodes(f.node)
    return m


def _export(name: str, exporter: str) -> onnx.ModelProto:
    import torch

    make, inputs = _torch_modules()[name]
    torch.manual_seed(SEED)
    module = make().eval()
    args, input_names, dynamic_shapes = inputs()
    with torch.no_grad(), quiet_torch():
        if exporter == "dynamo":
            program = torch.onnx.export(module, args, dynamo=True, input_names=input_names,
                                        output_names=["y"], opset_version=TORCH_OPSET,
                                        dynamic_shapes=dynamic_shapes, external_data=False,
                                        optimize=True, verbose=False)
            proto = program.model_proto
        else:
            buf = io.BytesIO()
            torch.onnx.export(module, args, buf, dynamo=False, input_names=input_names,
                              output_names=["y"], opset_version=TORCH_OPSET,
                              do_constant_folding=True, verbose=False)
            proto = onnx.load_from_string(buf.getvalue())
    proto = strip(proto)
    onnx.checker.check_model(proto, full_check=True)
    return proto


# The same modules as torch.export programs (``torch.export.save``), the input of
# ``legalize model.pt2``: dynamic dims as above; a few tens of KiB each, deterministic.
PT2_MODELS = [f"{name}.pt2" for name in ("transformer_block", "mlp", "small_cnn")]


def export_program(name: str):
    """The ``torch.export`` program of sample module ``name`` (seeded weights, the
    dynamic dims of ``_torch_modules``)."""
    import torch

    make, inputs = _torch_modules()[name]
    torch.manual_seed(SEED)
    module = make().eval()
    args, input_names, dynamic_shapes = inputs()
    with quiet_torch():
        return torch.export.export(module, args, dynamic_shapes=tuple(dynamic_shapes[n] for n in input_names))


def save_pt2(name: str, path: Path) -> None:
    import torch

    with quiet_torch():
        program = export_program(name)
    for node in program.graph.nodes:  # source paths of this checkout: the file would depend on where it is
        node.meta.pop("stack_trace", None)
    with quiet_torch():
        torch.export.save(program, str(path))


def torch_models() -> Tuple[Dict[str, Callable[[], onnx.ModelProto]], str]:
    """The torch-exported models this environment can make, and why the others are
    skipped ('' when none is)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return {}, "torch is not installed (pip install -e '.[torch]')"
    makers = {}
    for fname in TORCH_MODELS:
        name, exporter, _ = fname.split(".")
        makers[fname] = (lambda n=name, e=exporter: _export(n, e))
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        for fname in TORCH_MODELS:
            if ".dynamo." in fname:
                del makers[fname]
        return makers, "onnxscript (needed by the dynamo exporter) is not installed (pip install -e '.[torch]')"
    return makers, ""
