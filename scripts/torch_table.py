"""The table of docs/pytorch.md: each rank-6/7 case of tests/torch_cases.py before and
after ``legalizer.torch.legalize(ep, target)``: its highest rank, coremltools 9.0's
verdict (``convert(..., convert_to="mlprogram")``), ExecuTorch's (XNNPACK partitioner,
the ``.pte`` run on its runtime and compared with the module), and the times.

    python scripts/torch_table.py [--target coreml]
    python scripts/torch_table.py --corpus     # the corpus's torch.export programs (pt2_*)

``--corpus``: each torch.export program of the corpus (``.cache/corpus/pt2_*.pt2``,
built by scripts/corpus.py) before and after: coremltools and ExecuTorch on the program
as exported (decomposed) and on its legal form, ``legalize`` run as a user runs it (the
command, with its check: PyTorch, and ExecuTorch where installed) and its time.

Needs the torch, coreml and executorch extras; a missing one's columns say so."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _coreml(ep):
    try:
        import coremltools as ct
    except ImportError:
        return "needs the coreml extra", 0.0
    t = time.perf_counter()
    try:
        ct.convert(ep, convert_to="mlprogram")
        return "converts", time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 - its words are the verdict
        return f"refused: {str(e).splitlines()[0][:60]}", time.perf_counter() - t


def _executorch(ep, module, args):
    try:
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.runtime import Runtime
    except ImportError:
        return "needs the executorch extra", 0.0
    t = time.perf_counter()
    try:
        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        program = Runtime.get().load_program(pte.buffer)  # owns the method's arenas: keep it alive
        got = program.load_method("forward").execute(list(args))
        ok = torch.allclose(got[0], module(*args), rtol=1e-5, atol=1e-5)
        return ("runs, matches" if ok else "runs, differs"), time.perf_counter() - t
    except Exception as e:  # noqa: BLE001
        return f"fails: {str(e).splitlines()[0][:50]}", time.perf_counter() - t


def _hf_swin():
    """transformers' Swin from a small config (random weights; the corpus extra), its
    first output; None without transformers."""
    try:
        import transformers
    except ImportError:
        return None
    import torch

    class First(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)[0]

    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
                                     num_heads=[2, 2], window_size=2)
    return First(transformers.SwinModel(config).eval()), (torch.randn(1, 3, 32, 32),)


def _check_cell(row: dict) -> str:
    """The command's verdict: exit, the check in PyTorch and on ExecuTorch."""
    if row.get("exit") != 0:
        return f"exit {row.get('exit')}: {(row.get('error') or row.get('stderr', ''))[-80:]}"
    cell = "PyTorch matches" if row.get("matched") else "PyTorch differs" if row.get("check_ran") else "not run"
    if "executorch_ran" in row:
        cell += (", ExecuTorch matches" if row["executorch_matched"] else ", ExecuTorch differs"
                 if row["executorch_ran"] else f", ExecuTorch not run ({row.get('executorch_error')})")
    return cell


def corpus_table(target: str) -> None:
    """The corpus's torch.export programs, before and after (module docstring)."""
    import tempfile

    from corpus_models import CACHE, cached, legalize_row, select
    from legalizer.kinds.pt2.safety import load_untrusted
    from legalizer.torch import run

    paths = cached(CACHE, [n for n in select(["pt2_*"])])
    if not paths:
        print("torch_table: no torch.export program in the corpus: python scripts/corpus.py --only 'pt2_*'",
              file=sys.stderr)
        sys.exit(2)
    print("| program | rank before -> after | coremltools before | after | ExecuTorch (XNNPACK) before | after |"
          " legalize (library) | `legalize` with its check | the check |")
    print("| --- | --- | --- | --- | --- | --- | ---: | ---: | --- |")
    for path in paths:
        original = load_untrusted(path)
        args = tuple(original.example_inputs[0])
        ep = original.run_decompositions()
        t = time.perf_counter()
        legal = run(original, target).program
        t_legal = time.perf_counter() - t
        module = original.module()
        cb, tcb = _coreml(ep)
        ca, tca = _coreml(legal)
        eb, teb = _executorch(ep, module, args)
        ea, tea = _executorch(legal, module, args)
        with tempfile.TemporaryDirectory() as d:
            row = legalize_row(path, target, Path(d))
        print(f"| {path.stem} | {_rank(ep)} -> {_rank(legal)} | {cb} ({tcb:.1f} s) | {ca} ({tca:.1f} s) | {eb} ({teb:.1f} s)"
              f" | {ea} ({tea:.1f} s) | {t_legal:.2f} s | {row['seconds']:.1f} s | {_check_cell(row)} |", flush=True)


def _rank(p):
    return max(len(n.meta["val"].shape) for n in p.graph.nodes if hasattr(n.meta.get("val"), "shape"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="coreml")
    ap.add_argument("--corpus", action="store_true", help="the corpus's torch.export programs (.cache/corpus/pt2_*)")
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    if opts.corpus:
        corpus_table(opts.target)
        return
    import torch

    from legalizer.torch import run
    from torch_cases import cases

    rank = _rank
    print("| case | rank before -> after | coremltools before | after | ExecuTorch (XNNPACK) before | after |"
          " legalize | check in PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | ---: | --- |")
    rows = dict(cases())
    swin = _hf_swin()
    if swin is not None:
        rows["hf_swin (transformers)"] = swin
    for name, (module, args) in rows.items():
        ep = torch.export.export(module, args, strict=False).run_decompositions()
        t = time.perf_counter()
        legal = run(ep, opts.target).program
        t_legal = time.perf_counter() - t
        same = torch.allclose(legal.module()(*args), module(*args), rtol=1e-5, atol=1e-5)
        cb, tcb = _coreml(ep)
        ca, tca = _coreml(legal)
        eb, teb = _executorch(ep, module, args)
        ea, tea = _executorch(legal, module, args)
        print(f"| {name} | {rank(ep)} -> {rank(legal)} | {cb} ({tcb:.1f} s) | {ca} ({tca:.1f} s) | {eb} ({teb:.1f} s)"
              f" | {ea} ({tea:.1f} s) | {t_legal:.2f} s | {'matches' if same else 'differs'} |", flush=True)


if __name__ == "__main__":
    main()
