"""What the broadcast tests share: one-thread onnxruntime sessions, and a probe of
the legal form at run time."""

from __future__ import annotations

import onnx


def session(model: onnx.ModelProto, providers):
    """An onnxruntime session on one thread: the models are tiny, and a thread pool per
    session only spins."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=providers)


def probe(out: onnx.ModelProto, ops):
    """``out`` with the operands of each broadcasting op as extra graph outputs, so their
    runtime shapes can be checked: the target's legal form must hold at run time, not
    only in the declared types (onnx's Expand broadcasts both ways, so an Expand to a
    wrong shape can still leave the op to broadcast implicitly and compute numpy's
    result). Returns the model and [(operand names, result name)]."""
    p = onnx.ModelProto()
    p.CopyFrom(out)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(onnx.shape_inference.infer_shapes(out).graph.value_info) + list(out.graph.input)}
    types.update({t.name: t.data_type for t in out.graph.initializer})
    nodes = [(list(n.input), n.output[0]) for n in p.graph.node if n.op_type in ops]
    have = {o.name for o in p.graph.output}
    for name in dict.fromkeys(x for ins, o in nodes for x in ins + [o]):
        if name not in have:
            p.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
    return p, nodes


def check_legal_at_run_time(target, nodes, names, results, where):
    """xla: every operand has the result's shape; tosa: the result's rank, and each dim
    the result's or 1."""
    got = dict(zip(names, results))
    for ins, o in nodes:
        shape = got[o].shape
        for x in ins:
            if target == "xla":
                assert got[x].shape == shape, f"{where}: {x} is {got[x].shape} at {o} of {shape}"
            else:
                assert got[x].ndim == len(shape) and all(d in (1, r) for d, r in zip(got[x].shape, shape)), \
                    f"{where}: {x} is {got[x].shape} at {o} of {shape}"
