"""PyTorch in, PyTorch out (issue 33): a torch.export program legalized for a rank limit
comes back as a torch.export program that computes the same, keeps its signature, state,
symbolic dims and source metadata, loads through the safe loader, and is taken by the
target's own tools (coremltools, ExecuTorch with XNNPACK) where they are installed."""

from __future__ import annotations

import pytest

from torch_cases import cases

pytestmark = pytest.mark.needs("torch")

NAMES = ["swin_windows", "groupnorm_5d", "upfirdn_zeros", "two_sided_product", "video_patchify"]


@pytest.fixture(scope="module")
def programs():
    import torch

    out = {}
    for name, (module, args) in cases().items():
        out[name] = (module, args, torch.export.export(module, args))
    return out


def _ranks(program):
    return [len(n.meta["val"].shape) for n in program.graph.nodes if hasattr(n.meta.get("val"), "shape")]


def _calls(program):
    return [n for n in program.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name", NAMES)
def test_case_is_legal_for_coreml_and_computes_the_same(name, programs, tmp_path):
    import torch

    from legalizer.kinds.pt2.safety import load_untrusted
    from legalizer.torch import run

    module, args, ep = programs[name]
    assert max(_ranks(ep.run_decompositions())) > 5  # the case is a case
    result = run(ep, "coreml")
    legal = result.program
    assert result.refused_before and not result.refused_after
    assert max(_ranks(legal)) <= 5
    want = module(*args)
    torch.testing.assert_close(legal.module()(*args), want, rtol=1e-5, atol=1e-5)
    # The signature, the state, the constants are the program's.
    assert [s.arg.name for s in legal.graph_signature.input_specs] == \
           [s.arg.name for s in ep.graph_signature.input_specs]
    assert legal.state_dict.keys() == ep.state_dict.keys()
    for k, v in ep.state_dict.items():
        assert legal.state_dict[k] is v
    # Every call keeps the source of the node it stands for.
    for node in _calls(legal):
        assert "stack_trace" in node.meta and "nn_module_stack" in node.meta, node.name
    # Written and read back by the safe loader: the same program.
    path = tmp_path / f"{name}.legal.pt2"
    torch.export.save(legal, str(path))
    again = load_untrusted(path)
    torch.testing.assert_close(again.module()(*args), want, rtol=1e-5, atol=1e-5)
    assert max(_ranks(again)) <= 5


def test_each_case_lowers_as_expected(programs):
    """What the lowering made, per case: the counters say which rewrite each needed."""
    from legalizer.torch import run

    stats = {name: run(programs[name][2], "coreml").stats for name in NAMES}
    assert stats["video_patchify"]["aten_block_swaps"] == 2  # a rank-6 permute of merged dims: two swaps
    assert stats["two_sided_product"]["aten_broadcasts_made_explicit"] == 6  # 3 dims of each operand
    assert "aten_block_swaps" not in stats["swin_windows"]  # merged dims alone make it rank 4
    assert stats["upfirdn_zeros"]["aten_ops_lowered"] == 1  # the pad, on dims merged with their padding


def test_padding_merges_with_the_dims_inside(programs):
    """upfirdn's pad of two size-1 dims is one rank-3 pad: (0, 1) on the innermost, and
    (0, W) on the dim that holds W."""
    from legalizer.torch import legalize

    legal = legalize(programs["upfirdn_zeros"][2], "coreml")
    pads = [n for n in _calls(legal) if "constant_pad_nd" in str(n.target)]
    assert len(pads) == 1
    assert list(pads[0].args[1]) == [0, 1, 0, 6, 0, 0]
    assert list(pads[0].meta["val"].shape) == [15, 12, 2]


def test_a_legal_program_comes_back_unchanged_in_structure():
    import torch

    from legalizer.torch import run

    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ep = torch.export.export(module, (torch.randn(3, 8),))
    result = run(ep, "coreml")
    # (fx suffixes a placeholder named after a builtin, Sequential's ``input``: the spec follows it)
    before = [(n.op, str(n.target), n.name if n.op != "placeholder" else "") for n in ep.run_decompositions().graph.nodes]
    after = [(n.op, str(n.target), n.name if n.op != "placeholder" else "") for n in result.program.graph.nodes]
    assert after == before
    assert result.stats == {} and not result.refused_before


def test_a_rank_6_graph_input_is_refused_naming_it():
    import torch

    from legalizer.errors import BadInput
    from legalizer.torch import legalize, run

    class M(torch.nn.Module):
        def forward(self, a, b):
            return (a * b).reshape(2, -1)

    ep = torch.export.export(M(), (torch.randn(2, 1, 3, 1, 4, 1), torch.randn(1, 5, 1, 6, 1, 7)))
    with pytest.raises(BadInput) as e:
        legalize(ep, "coreml")
    assert "'a' has rank 6 > 5 (Core ML only supports tensors with rank <= 5)" in str(e.value)
    assert run(ep, "coreml").refused_after  # not strict: the program, and what is still refused


def test_symbolic_batch_and_its_range_stay():
    import torch
    from torch.export import Dim

    from legalizer.torch import legalize

    module, args = cases()["swin_windows"]
    batch = Dim("batch", min=1, max=64)
    ep = torch.export.export(module, args, dynamic_shapes={"x": {0: batch}})
    legal = legalize(ep, "coreml")
    assert {str(k): (int(v.lower), int(v.upper)) for k, v in legal.range_constraints.items()} == \
           {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()}
    x = [n for n in legal.graph.nodes if n.op == "placeholder" and n.name == "x"][0]
    assert not isinstance(x.meta["val"].shape[0], int)
    assert max(_ranks(legal)) <= 5
    bigger = torch.randn(5, 8, 8, 8)
    torch.testing.assert_close(legal.module()(bigger), module(bigger), rtol=1e-5, atol=1e-5)


def test_tosa_level_8k_lowers_only_past_rank_6(programs):
    """TOSA 8K takes rank 6: only the rank-7 patchify is lowered; the tosa form's equal
    ranks (equalize_ranks, on ATen ops) view Swin's bias to the rank of the windows."""
    import torch

    from legalizer.torch import run

    module, args, ep = programs["swin_windows"]
    swin = run(ep, "tosa")
    assert swin.stats == {"reshapes_inserted": 1}
    add = [n for n in _calls(swin.program) if "add.Tensor" in str(n.target)][0]
    assert [len(a.meta["val"].shape) for a in add.args] == [4, 4]
    torch.testing.assert_close(swin.program.module()(*args), module(*args))
    result = run(programs["video_patchify"][2], "tosa")
    assert max(_ranks(result.program)) <= 6 and not result.refused_after
    module, args, _ = programs["video_patchify"]
    torch.testing.assert_close(result.program.module()(*args), module(*args))


@pytest.mark.needs("coreml")
@pytest.mark.parametrize("name", ["groupnorm_5d", "upfirdn_zeros", "two_sided_product"])
def test_coremltools_refuses_the_original_and_converts_the_legal_form(name, programs):
    import coremltools as ct

    from legalizer.torch import legalize

    ep = programs[name][2].run_decompositions()
    with pytest.raises(ValueError, match="Core ML only supports tensors with rank <= 5"):
        ct.convert(ep, convert_to="mlprogram")
    mlmodel = ct.convert(legalize(ep, "coreml"), convert_to="mlprogram")
    assert mlmodel is not None


@pytest.mark.needs("executorch")
@pytest.mark.parametrize("name", NAMES)
def test_executorch_xnnpack_runs_the_legal_form_and_matches(name, programs):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from legalizer.torch import legalize

    module, args, ep = programs[name]
    pte = to_edge_transform_and_lower(legalize(ep, "coreml"), partitioner=[XnnpackPartitioner()]).to_executorch()
    program = Runtime.get().load_program(pte.buffer)  # it owns the method's arenas: kept alive
    got = program.load_method("forward").execute(list(args))
    torch.testing.assert_close(got[0], module(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.needs("corpus")
def test_a_transformers_swin_is_legal_for_coreml():
    """A real architecture: transformers' Swin (a small config, random weights) has rank-6
    window partitions; its legal form is rank <= 5 and computes the same."""
    import torch
    import transformers

    from legalizer.torch import run

    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
                                     num_heads=[2, 2], window_size=2)
    module = transformers.SwinModel(config).eval()
    args = (torch.randn(1, 3, 32, 32),)
    ep = torch.export.export(module, args, strict=False)
    assert max(_ranks(ep.run_decompositions())) == 6
    result = run(ep, "coreml")
    assert max(_ranks(result.program)) <= 5 and not result.refused_after
    got, want = result.program.module()(*args), module(*args)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert result.program.state_dict.keys() == ep.state_dict.keys()


@pytest.mark.needs("corpus")
def test_a_transformers_swin_keeps_its_dynamic_batch(tmp_path):
    """Swin with a dynamic batch: fake-tensor propagation of its zero padding
    (``constant_pad_nd``) takes ``int`` of the batch, which specialized the program's
    symbol for the whole legal program of a program read from a .pt2 (saved, it then
    refused any batch but 2). The legal program keeps the batch symbolic and its range,
    and, saved and read back, computes the same at another batch."""
    import torch
    import transformers
    from torch.export import Dim

    from legalizer.kinds.pt2.safety import load_untrusted
    from legalizer.torch import run

    torch.manual_seed(0)
    config = transformers.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
                                     num_heads=[2, 2], window_size=2)
    module = transformers.SwinModel(config).eval()
    ep = torch.export.export(module, (torch.randn(2, 3, 32, 32),),
                             dynamic_shapes={"pixel_values": {0: Dim("batch", min=1, max=8)}}, strict=False)
    torch.export.save(ep, str(tmp_path / "swin.pt2"))
    ep = load_untrusted(tmp_path / "swin.pt2")  # as the command line reads it: its shape env made anew
    legal = run(ep, "coreml").program
    (x,) = (n for n in legal.graph.nodes if n.op == "placeholder" and n.name == "pixel_values")
    (symbol,) = ep.range_constraints
    assert str(x.meta["val"].shape[0]) == str(symbol) and legal.range_constraints == ep.range_constraints
    torch.export.save(legal, str(tmp_path / "swin.legal.pt2"))
    three = torch.randn(3, 3, 32, 32)
    got = load_untrusted(tmp_path / "swin.legal.pt2").module()(three)
    torch.testing.assert_close(got[0], module(three)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.needs("executorch")
@pytest.mark.parametrize("name", NAMES)
def test_executorch_transform_pass_legalizes_the_edge_program(name, programs):
    """``executorch_pass`` in ``to_edge_transform_and_lower(transform_passes=[...])``: the
    Edge program is legalized in the Edge dialect's ops before XNNPACK partitions it;
    the .pte runs on ExecuTorch's runtime and matches the module."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from legalizer.torch import executorch_pass

    module, args, ep = programs[name]
    seen = []

    class Spy(XnnpackPartitioner):  # what the partitioner is given: the legal Edge program
        def partition(self, exported_program):
            seen.append(max(_ranks(exported_program)))
            return super().partition(exported_program)

    manager = to_edge_transform_and_lower(ep, transform_passes=[executorch_pass("coreml")], partitioner=[Spy()])
    assert seen and max(seen) <= 5
    program = Runtime.get().load_program(manager.to_executorch().buffer)  # it owns the arenas: kept alive
    torch.testing.assert_close(program.load_method("forward").execute(list(args))[0], module(*args),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.needs("executorch")
def test_the_rank_7_patchify_fails_on_executorch_without_legalizing(programs):
    """The issue's XNNPACK case: lowered as it is, the .pte does not run."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    module, args, ep = programs["video_patchify"]
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        program = Runtime.get().load_program(pte.buffer)
        program.load_method("forward").execute(list(args))


def test_suggested_fixes_round_trip_through_torch_export():
    """GroupNorm on 5-D input with two dynamic dims: the merged dims are a product of two
    symbols, which no view of a rank-5 form can name alone, so the target still refuses
    it. The suggested fix (one dim static) goes through torch.export's own
    refine_dynamic_shapes_from_suggested_fixes; exported again, the program is legal."""
    import torch
    from torch.export import Dim
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    from legalizer.torch import run

    module, args = cases()["groupnorm_5d"]
    shapes = {"x": {2: Dim("depth", min=2, max=16), 3: Dim("height", min=2, max=16)}}
    result = run(torch.export.export(module, args, dynamic_shapes=shapes), "coreml")
    assert result.refused_after
    fixes = result.suggested_fixes(shapes)
    assert fixes == "Suggested fixes:\n  height = 4"
    refined = refine_dynamic_shapes_from_suggested_fixes(fixes, shapes)
    assert refined["x"][3] == 4 and refined["x"][2] is shapes["x"][2]
    again = run(torch.export.export(module, args, dynamic_shapes=refined), "coreml")
    assert not again.refused_after and again.suggested_fixes(refined) == ""
    deeper = torch.randn(2, 8, 7, 4, 4)  # the depth is still dynamic
    torch.testing.assert_close(again.program.module()(deeper), module(deeper), rtol=1e-5, atol=1e-5)


def test_cli_legalizes_a_pt2_for_coreml_and_names_what_it_cannot(tmp_path, legalize):
    """``legalize m.pt2 --target coreml``: the rank-6 window partition comes back as a
    rank <= 5 program, the lowering counted in the report; a rank-6 graph input, which no
    legal form changes, is named in a warning per op that reads it."""
    import json

    import torch

    from legalizer.kinds.pt2.safety import load_untrusted

    module, args = cases()["swin_windows"]
    src = tmp_path / "swin.pt2"
    torch.export.save(torch.export.export(module, args), str(src))
    p = legalize(src, "--target", "coreml", "--report", tmp_path / "r.json", isolated=True, prelude="", timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target_rules"]["ranks_lowered"]["aten_ops_lowered"] == 2
    assert report["target_rules"]["refused_before"] and not report["target_rules"]["refused_after"]
    assert max(_ranks(load_untrusted(tmp_path / "swin.legal.pt2"))) <= 5

    class Rank6Inputs(torch.nn.Module):
        def forward(self, a, b):
            return (a * b).reshape(2, -1)

    bad = tmp_path / "in6.pt2"
    torch.export.save(torch.export.export(Rank6Inputs(), (torch.randn(2, 1, 3, 1, 4, 1), torch.randn(1, 5, 1, 6, 1, 7))),
                      str(bad))
    p = legalize(bad, "--target", "coreml", isolated=True, prelude="", timeout=600)
    # no legal form keeps a rank-6 interface: refused before any work, naming both inputs
    assert p.returncode == 2 and not (tmp_path / "in6.legal.pt2").exists(), p.stderr
    assert p.stderr.splitlines()[-1].endswith(
        "target 'coreml' takes rank <= 5, and no legal form keeps the model's interface:"
        " input 'a' has rank 6, input 'b' has rank 6"), p.stderr


def test_cli_suggested_fixes_round_trip_through_torch_export(tmp_path, legalize):
    """``legalize m.pt2`` of GroupNorm on 5-D input with two dynamic dims: coreml still
    refuses it (its merged dims are a product of two symbols). The terminal and the
    report give torch.export's suggested fixes, each dim named by its symbol; the
    report's dynamic_shapes (the program's dynamic dims, so named) refined with them by
    torch.export's own helper and exported again: legal, with no fixes, one dim still
    dynamic."""
    import json

    import torch
    from torch.export import Dim
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    from legalizer.kinds.pt2.safety import load_untrusted

    module, args = cases()["groupnorm_5d"]
    src = tmp_path / "gn.pt2"
    shapes = {"x": {2: Dim("depth", min=2, max=16), 3: Dim("height", min=2, max=16)}}
    torch.export.save(torch.export.export(module, args, dynamic_shapes=shapes), str(src))
    p = legalize(src, "--target", "coreml", "--report", tmp_path / "r.json", isolated=True, prelude="", timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target_rules"]["refused_after"]
    fixes = report["suggested_fixes"]
    program = load_untrusted(src)
    (x,) = (n for n in program.graph.find_nodes(op="placeholder") if n.name == "x")
    depth, height = (str(d.node.expr) for d in x.meta["val"].shape[2:4])
    assert fixes["text"] == f"Suggested fixes:\n  {height} = 4"
    assert [(f["dim"], f["input"], f["axis"]) for f in fixes["fixes"]] == [(height, "x", 3)]
    assert fixes["dynamic_shapes"] == {"x": {"2": {"name": depth, "min": 2, "max": 16, "size": 3},
                                             "3": {"name": height, "min": 2, "max": 16, "size": 4}}}
    lines = p.stdout.splitlines()
    at = lines.index("Suggested fixes:")
    assert lines[at - 1] == f"suggested fixes to the program's dynamic_shapes ({height} is input 'x' dim 3):"
    assert lines[at + 1] == f"  {height} = 4"

    named = {arg: {int(axis): Dim(d["name"], min=d["min"], max=d["max"]) for axis, d in dims.items()}
             for arg, dims in fixes["dynamic_shapes"].items()}
    refined = refine_dynamic_shapes_from_suggested_fixes(fixes["text"], named)
    assert refined["x"][3] == 4 and refined["x"][2] is named["x"][2]
    again = tmp_path / "gn2.pt2"
    torch.export.save(torch.export.export(module, args, dynamic_shapes=refined), str(again))
    p = legalize(again, "--target", "coreml", "--report", tmp_path / "r2.json", isolated=True, prelude="", timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "r2.json").read_text())
    assert not report["target_rules"]["refused_after"] and "suggested_fixes" not in report
    assert "Suggested fixes:" not in p.stdout
    legal = load_untrusted(tmp_path / "gn2.legal.pt2")
    assert max(_ranks(legal)) <= 5 and len(legal.range_constraints) == 1


def test_fixes_for_runtime_constraints_and_static_targets():
    """The fixes each kind of runtime constraint takes, in torch.export's form: two dims
    that must be equal (``s1 = s0``), a dim against a size (``s0 = 4``), a two-sided
    broadcast (neither may be 1: ``Dim(..., min=2)`` for a dim whose range holds 1, then
    equal), which torch.export's helper applies; a target that takes static shapes only:
    every dim at its example size."""
    import torch
    from torch.export import Dim
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    from legalizer.kinds.pt2.suggested_fixes import DynamicDim, suggest, text

    dims = [DynamicDim("s0", "x", 0, 2, None, 3), DynamicDim("s1", "y", 0, 1, 9, 5), DynamicDim("s2", "y", 1, 2, 8, 6)]
    assert text(suggest(dims, refused={}, constraints=[("eq", "s0", "s2")])) == "Suggested fixes:\n  s2 = s0"
    assert text(suggest(dims, refused={}, constraints=[("bcast", "s2", 4)])) == "Suggested fixes:\n  s2 = 4"
    assert text(suggest(dims, refused={}, constraints=[("bcast", "s1", "s0")])) == "Suggested fixes:\n  s1 = s0"
    assert text(suggest(dims, refused={}, constraints=[("bcast", "s1", "s2")])) == \
        "Suggested fixes:\n  s1 = Dim('s1', min=2, max=9)\n  s2 = s1"
    assert text(suggest(dims, refused={}, static="static")) == "Suggested fixes:\n  s0 = 3\n  s1 = 5\n  s2 = 6"
    assert text(suggest(dims, refused={"s2": "r", "s1": "r"})) == "Suggested fixes:\n  s2 = 6"
    assert text(suggest(dims, refused={}, constraints=[("eq", "x[0]", "y[1]")])) == ""
    shapes = {"x": {0: Dim("s0")}, "y": {0: Dim("s1", min=1, max=9), 1: Dim("s2", max=8)}}
    fixed = refine_dynamic_shapes_from_suggested_fixes(
        text(suggest(dims, refused={}, constraints=[("bcast", "s1", "s2")])), shapes)
    assert fixed["y"][0].min == 2 and fixed["y"][1] is fixed["y"][0]

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    ep = torch.export.export(Add(), (torch.randn(5, 3), torch.randn(5, 3)),
                             dynamic_shapes={"x": {0: Dim("a", min=2, max=9)}, "y": {0: Dim("a", min=2, max=9)}})
    from legalizer.kinds.pt2.suggested_fixes import dynamic_dims

    (d,) = dynamic_dims(ep)
    assert (d.input, d.axis, d.min, d.max, d.size) == ("x", 0, 2, 9, 5) and d.name == str(next(iter(ep.range_constraints)))
    unbounded = torch.export.export(Add(), (torch.randn(5, 3), torch.randn(5, 3)),
                                    dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("a")}})
    (d,) = dynamic_dims(unbounded)  # its range: VR[0, int_oo]
    assert (d.min, d.max, d.dim()) == (0, None, f"Dim('{d.name}', min=0)")


def _pt2(tmp_path, name, module, args, **kwargs):
    import torch

    path = tmp_path / f"{name}.pt2"
    torch.export.save(torch.export.export(module, args, **kwargs), str(path))
    return path


@pytest.mark.needs("executorch")
def test_cli_check_runs_the_legal_program_on_executorch(tmp_path, legalize):
    """The video ViT's rank-7 patchify, its batch dynamic: the check lowers the legal
    program with XNNPACK at each binding's shapes, runs the .pte on ExecuTorch's runtime
    and compares it with the original in PyTorch, in the same report; without the
    extra, the report says it did not run, naming the extra, and nothing else changes."""
    import json

    from torch.export import Dim

    module, args = cases()["video_patchify"]
    src = _pt2(tmp_path, "patchify", module, args, dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}})
    p = legalize(src, "--target", "coreml", "--report", tmp_path / "r.json", isolated=True, prelude="", timeout=900)
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    et, pt = report["check"]["executorch"], report["check"]
    assert (et["ran"], et["ok"], et["provider"]) == (True, True, "ExecuTorch (XNNPACK)")
    # (lowered once, at PyTorch's first binding; PyTorch's check has both)
    assert len(pt["bindings"]) == 2 and [b["dims"] for b in et["bindings"]] == [pt["bindings"][0]["dims"]]
    assert all(o["name"] == "view_1" and o["stats"]["total"] == 1152 // 2 * b["dims"][next(iter(b["dims"]))]
               for b in et["bindings"] for o in b["outputs"])
    executorch_lines = [ln for ln in p.stdout.splitlines() if ln.startswith("PASSED | executorch | Output: 'view_1' |")]
    assert len(executorch_lines) == 1, p.stdout
    assert p.stdout.splitlines()[-1].endswith("outputs match in PyTorch, and on ExecuTorch (XNNPACK)")
    assert not report["warnings"]

    (tmp_path / "patchify.legal.pt2").unlink()
    p = legalize(src, "--target", "coreml", "--report", tmp_path / "r2.json", isolated=True, timeout=900,
                 prelude="import sys; sys.modules['executorch'] = None; ")
    assert p.returncode == 0, p.stderr
    without = json.loads((tmp_path / "r2.json").read_text())
    assert without["check"]["executorch"] == {
        "ran": False, "provider": "ExecuTorch (XNNPACK)", "ok": None, "bindings": [],
        "error": "ExecuTorch is not installed: pip install 'legalizer[executorch]'"}
    assert without["check"]["ok"] and not without["warnings"] and "executorch |" not in p.stdout
    assert p.stdout.splitlines()[-1].endswith("outputs match in PyTorch")
    for key in ("violations", "stats", "target_rules"):
        assert without[key] == report[key]


@pytest.mark.needs("executorch")
def test_executorch_check_tells_a_pte_that_differs(tmp_path):
    """The comparison itself: a .pte that computes otherwise than the original fails
    its outputs (the check's exit 1), one that computes the same passes, and a legal
    file that ExecuTorch cannot read leaves the check not run."""
    import torch

    from legalizer.kinds.pt2.importer import declaration, import_program, user_inputs
    from legalizer.numeric.executorch_run import check_executorch

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class Thrice(torch.nn.Module):
        def forward(self, x):
            return x * 3

    args = (torch.randn(2, 3),)
    original = torch.export.export(Twice(), args)
    model = import_program(original)
    declared, names = declaration(model), user_inputs(model.aten.program)
    same = check_executorch(original, declared, names, _pt2(tmp_path, "twice", Twice(), args))
    assert same.ran and same.ok and len(same.bindings) == 1
    other = check_executorch(original, declared, names, _pt2(tmp_path, "thrice", Thrice(), args))
    assert other.ran and not other.ok
    (out,) = other.bindings[0].outputs
    assert not out.ok and out.max_abs_err > 0
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a pt2")
    refused = check_executorch(original, declared, names, junk)  # (a program it does not load: not run)
    assert (refused.ran, refused.bindings) == (False, [])
    assert refused.error.startswith("ExecuTorch does not lower or load the legal program: ")


def test_constraints_of_a_torch_exported_onnx_name_the_input_dims(tmp_path):
    """torch.onnx.export(dynamo=True) writes torch's symbols (``s0``, ``s1``) or the
    ``Dim`` names as dim_params: each runtime constraint says at which input dims the dims
    it names are declared, in the report and (with -v) on the terminal."""
    import json

    import onnx
    from onnx import TensorProto, helper

    from helpers import cli_in_process

    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"], name="node_add")], "main_graph",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s0", 8]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s1", 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 8])])
    src, rep = tmp_path / "add.onnx", tmp_path / "r.json"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    code, text, err = cli_in_process(src, "-o", tmp_path / "o.onnx", "--report", rep, "-v", "--no-check")
    assert code == 0, text + err
    assert json.loads(rep.read_text())["constraints"] == [
        {"text": "s0 == s1 or s0 == 1 or s1 == 1", "nodes": ["node_add"], "inputs": {"s0": ["x[0]"], "s1": ["y[0]"]}}]
    assert "constraint: s0 == s1 or s0 == 1 or s1 == 1  (nodes: node_add; s0: x[0]; s1: y[0])" in text.splitlines()
