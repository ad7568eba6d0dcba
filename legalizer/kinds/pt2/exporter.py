"""The IR of a ``torch.export`` program (``kinds.pt2.importer``) written back as an
``ExportedProgram``.

Each node is the call it was read as, or the call a pass made (``AtenCall``); the
program keeps its signature (inputs as they were; each output now the value the legal
graph computes for it), its state dict, constants, range constraints and module call
graph. Every node keeps the source metadata (``stack_trace``, ``nn_module_stack``, ...)
of the fx node it stands for; a node a pass made takes that of the node it serves (its
first user that has some, else its operand's), as litert-torch's rank-reducing passes
do. The tensors' ``meta['val']`` are computed again by fake-tensor propagation in the
program's own fake mode, so its symbolic dims stay the same symbols.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Dict

from .records import In, call_of
from ...errors import BadInput, first_line
from ...ir.graph import CONST, OP, Graph, Node

# fx metadata that describes the tensors (computed again), not where the node came from.
_TENSOR_META = ("val", "tensor_meta", "unbacked_bindings", "example_value")
# What a node a pass made takes of the node it serves.
SOURCE_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "from_node", "seq_nr",
               "original_aten", "custom")


def _call(node: Node):
    call = call_of(node)
    if call is None:
        raise BadInput(f"node '{node.label}' ({node.op}) has no ATen call to write")
    return call


def inherit_meta(graph: Graph) -> int:
    """Give each node a pass made (no source metadata) the metadata of the node it
    serves; the number given."""
    given = 0
    order = graph.nodes()
    for node in reversed(order):  # users first: a chain of new nodes passes it up
        if node.kind != OP:
            continue
        call = _call(node)
        if any(k in call.meta for k in SOURCE_META):
            continue
        donor = None
        for v in node.outputs:
            for u, _ in graph.users(v):
                c = call_of(u) if u.kind == OP else None
                if c is not None and any(k in c.meta for k in SOURCE_META):
                    donor = c
                    break
            if donor is not None:
                break
        if donor is None:
            for v in node.inputs:
                p = v.producer if v is not None else None
                c = call_of(p) if p is not None and p.kind == OP else None
                if c is not None and any(k in c.meta for k in SOURCE_META):
                    donor = c
                    break
        if donor is not None:
            call.meta.update({k: donor.meta[k] for k in SOURCE_META if k in donor.meta})
            given += 1
    return given


def export_program(model):
    """The legal form of ``model`` (read by ``kinds.pt2.importer``) as an ``ExportedProgram``."""
    import torch
    import torch.fx
    from torch._guards import detect_fake_mode
    from torch.export.graph_signature import (ConstantArgument, InputKind, InputSpec,
                                              TensorArgument)


    src = model.aten
    ep = src.program
    graph = model.graph
    inherit_meta(graph)
    old = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    new = torch.fx.Graph()
    env: Dict[int, Any] = {}
    constants = dict(ep.constants)
    input_specs = list(ep.graph_signature.input_specs)
    order = graph.nodes()
    lifted = [n for n in order if n.kind == CONST]
    first_user = next((i for i, s in enumerate(input_specs) if s.kind == InputKind.USER_INPUT), len(input_specs))
    # Lifted constants go before the user inputs, as torch.export orders placeholders.
    slots = [(node.name, old[node.name].meta, node.outputs[0]) for node in graph.inputs]
    for k, node in enumerate(lifted):
        name = f"c_{node.outputs[0].name}"
        constants[name] = torch.from_numpy(node.data.array.copy())
        input_specs.insert(first_user + k, InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name=name), target=name))
        slots.insert(first_user + k, (name, {}, node.outputs[0]))
    placeholders = []
    renamed: Dict[str, str] = {}
    for name, meta, value in slots:
        ph = new.placeholder(name)
        if ph.name != name:  # fx gives a builtin's name (``input``) a suffix
            renamed[name] = ph.name
        ph.meta.update(meta)
        env[id(value)] = ph
        placeholders.append(ph)
    input_specs = [dataclasses.replace(s, arg=TensorArgument(name=renamed[s.arg.name]))
                   if getattr(s.arg, "name", None) in renamed else s for s in input_specs]
    for node in order:
        if node.kind != OP:
            continue
        call = _call(node)

        def arg(a, node=node, call=call):
            if isinstance(a, In):
                got = env[id(node.inputs[a.index])]
                if isinstance(got, tuple) and call.target is not operator.getitem:
                    raise BadInput(f"node '{node.label}' reads one result of a tuple without getitem")
                return got
            return a

        args = torch.fx.node.map_aggregate(call.args, arg)
        kwargs = dict(torch.fx.node.map_aggregate(call.kwargs, arg))
        if call.target is operator.getitem and isinstance(args[0], tuple):
            args = (args[0][0], args[0][1])
        fxn = new.create_node("call_function", call.target, tuple(args), kwargs, name=node.name or None)
        fxn.meta.update({k: v for k, v in call.meta.items() if k not in _TENSOR_META})
        if len(node.outputs) == 1:
            env[id(node.outputs[0])] = fxn
        else:
            for i, v in enumerate(node.outputs):
                env[id(v)] = (fxn, i)
    outs = []
    for node in graph.outputs:
        got = env[id(node.inputs[0])]
        if isinstance(got, tuple):
            raise BadInput(f"output '{node.label}' is one result of a tuple")
        outs.append(got)
    new.output(tuple(outs))
    gm = torch.fx.GraphModule(ep.graph_module, new)
    # The tensors' metadata again, in the program's fake mode (its symbols, its shape env).
    fake = detect_fake_mode([ph.meta.get("val") for ph in placeholders if ph.meta.get("val") is not None])
    vals = []
    for ph in placeholders:
        if ph.meta.get("val") is None:
            ph.meta["val"] = fake.from_tensor(constants[ph.name], static_shapes=True)
        vals.append(ph.meta["val"])
    try:
        _Propagation(gm, fake, ep.graph).propagate_dont_convert_inputs(*vals)
    except Exception as e:  # noqa: BLE001 - torch's words say which call fails
        raise BadInput(f"the legal form does not trace ({type(e).__name__}: {first_line(e)})") from None
    output_specs = []
    for spec, node in zip(ep.graph_signature.output_specs, outs):
        if isinstance(spec.arg, ConstantArgument):
            output_specs.append(spec)
        else:
            output_specs.append(dataclasses.replace(spec, arg=TensorArgument(name=node.name)))
    signature = dataclasses.replace(ep.graph_signature, input_specs=input_specs, output_specs=output_specs)
    call_graph = [_renamed(e, ep.graph_signature.output_specs, output_specs, renamed) for e in ep.module_call_graph]
    try:
        return torch.export.ExportedProgram(root=gm, graph=gm.graph, graph_signature=signature,
                                            state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                                            module_call_graph=call_graph, example_inputs=ep.example_inputs,
                                            constants=constants, verifiers=ep.verifiers)
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"the legal form is not a valid ExportedProgram ({type(e).__name__}: {first_line(e)})") from None


def _Propagation(gm, fake, original):
    """FakeTensorProp over the legal graph that gives a call the program had as it was
    (its name, target and arguments) the program's own ``val``: fake-tensor propagation
    of some calls (``constant_pad_nd`` on Swin's windows) takes ``int`` of a symbolic
    size, which specializes the program's symbol (a dynamic batch made 2) for the whole
    program, where tracing it did not."""
    import torch.fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    def names(a):
        return torch.fx.node.map_arg(a, lambda x: x.name)

    kept = {n.name: n for n in original.nodes if n.op == "call_function" and "val" in n.meta}

    class Propagation(FakeTensorProp):
        def run_node(self, n):
            o = kept.get(n.name)
            if o is not None and n.op == "call_function" and o.target is n.target and \
                    names(o.args) == names(n.args) and names(o.kwargs) == names(n.kwargs):
                n.meta["val"] = o.meta["val"]
                return o.meta["val"]
            return super().run_node(n)

    return Propagation(gm, mode=fake)


def _renamed(entry, before, after, inputs: Dict[str, str]):
    """A module call graph entry whose signature names the values by their new names."""
    sig = entry.signature
    if sig is None:
        return entry
    names = {b.arg.name: a.arg.name for b, a in zip(before, after) if hasattr(b.arg, "name")}
    outputs = [dataclasses.replace(o, name=names.get(o.name, o.name)) if hasattr(o, "name") else o
               for o in sig.outputs]
    ins = [dataclasses.replace(i, name=inputs.get(i.name, i.name)) if hasattr(i, "name") else i for i in sig.inputs]
    return dataclasses.replace(entry, signature=dataclasses.replace(sig, inputs=ins, outputs=outputs))


def save_program(program, path) -> None:
    """``torch.export.save`` to ``path`` (the caller makes the write atomic: through a
    buffer, as torch warns of a file whose name does not end in ``.pt2``)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.export.save(program, buf)
    with open(path, "wb") as f:
        f.write(buf.getbuffer())


def legal_program(model):
    """The legal ``ExportedProgram`` of ``model`` (``export_program``), made once: what
    is written, checked and exported to ONNX is the same program."""
    if model.aten.legal is None:
        model.aten.legal = export_program(model)
    return model.aten.legal


def onnx_export(program):
    """``program``'s ONNX export (``torch.onnx.export(..., dynamo=True)``: its symbolic
    dims stay ``dim_param``s), a ModelProto; BadInput in the exporter's words."""
    import torch

    try:
        with torch.no_grad():
            return torch.onnx.export(program, dynamo=True, external_data=False, optimize=True,
                                     verbose=False).model_proto
    except Exception as e:  # noqa: BLE001 - the exporter's words are the reason
        raise BadInput(f"torch.onnx.export cannot export the legal program to ONNX"
                       f" ({type(e).__name__}: {first_line(e)})") from None
