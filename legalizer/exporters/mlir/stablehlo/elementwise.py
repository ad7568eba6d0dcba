"""StableHLO lowerings of elementwise ONNX ops: arithmetic, comparisons, activations,
casts. Operands already have one shape (the ``xla`` legal form); where an op's own
semantics broadcast a scalar (Relu's 0) the lowering writes the broadcast."""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ....ir.graph import Node
from ..onnx_attrs import attr, params_are_operands
from ..registry import Unsupported, rule_directions, rule_op_names
from .emitter import LOWERINGS, TT, Emitter, arg, has_input, result_type

# ONNX ops that are one StableHLO op each (variadic ones a chain of it), the op as
# rules/onnx.toml names it.
_BINARY = rule_op_names("stablehlo", ("Add", "Sub", "Mul", "Div", "Max", "Min", "And", "Or", "Xor",
                                      "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Sum", "Mean"))
_NAMES = rule_op_names("stablehlo", ("Pow", "Mod", "BitShift"))
_COMPARE = rule_directions(("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"))


@LOWERINGS.register(*_BINARY)
def _binary(cx: Emitter, node: Node):
    # Variadic Sum/Max/Min/Mean: a chain of binary ops (the xla pipeline splits them, a
    # model that was not split still lowers the same way).
    out = result_type(node)
    xs = [cx.v(v) for v in node.inputs if v is not None]
    acc = xs[0]
    for x in xs[1:]:
        acc = cx.op(_BINARY[node.op], [acc, x], out)
    if node.op == "Mean" and len(xs) > 1:
        acc = cx.op("stablehlo.divide", [acc, cx.splat_like(len(xs), acc)], out)
    return [acc]


@LOWERINGS.register(*_COMPARE)
def _compare(cx: Emitter, node: Node):
    return [cx.compare(_COMPARE[node.op], arg(cx, node, 0), arg(cx, node, 1), result_type(node))]


@LOWERINGS.register("Pow")
def _pow(cx: Emitter, node: Node):
    base, exp = arg(cx, node, 0), arg(cx, node, 1)
    out = result_type(node)
    # ONNX lets the exponent have its own type; StableHLO's power takes one.
    return [cx.op(_NAMES["Pow"], [base, cx.convert(exp, cx.tt(base).elem)], out)]


@LOWERINGS.register("Mod")
def _mod(cx: Emitter, node: Node):
    a, b = arg(cx, node, 0), arg(cx, node, 1)
    out = result_type(node)
    r = cx.op(_NAMES["Mod"], [a, b], out)  # C's fmod: the sign of the dividend
    if attr(node, "fmod", 0):
        return [r]
    # fmod=0 is Python's (numpy's) mod, the sign of the divisor: r + b where r != 0 and
    # the signs of r and b differ.
    zero = cx.splat_like(0, r)
    fix = cx.op("stablehlo.and", [cx.compare("NE", r, zero),
                                  cx.compare("NE", cx.compare("LT", r, zero), cx.compare("LT", b, zero))],
                out.with_elem("i1"))
    return [cx.select(fix, cx.op("stablehlo.add", [r, b], out), r, out)]


@LOWERINGS.register("BitShift")
def _bitshift(cx: Emitter, node: Node):
    # A right shift of a signed type is arithmetic (the sign fills); StableHLO, like
    # ONNX, saturates a count out of range (negative, or at least the width).
    unsigned = result_type(node).elem.startswith("ui")
    right = "stablehlo.shift_right_logical" if unsigned else "stablehlo.shift_right_arithmetic"
    name = _NAMES["BitShift"] if attr(node, "direction") == "LEFT" else right
    return [cx.op(name, [arg(cx, node, 0), arg(cx, node, 1)], result_type(node))]


@LOWERINGS.register("Where")
def _where(cx: Emitter, node: Node):
    # (The xla pass's runtime broadcast checks are a Where each: the runtime constraint
    # they compute under is asserted with the others, see ``_Assertions``.)
    return [cx.select(arg(cx, node, 0), arg(cx, node, 1), arg(cx, node, 2), result_type(node))]


@LOWERINGS.register("PRelu")
def _prelu(cx: Emitter, node: Node):
    x, slope = arg(cx, node, 0), arg(cx, node, 1)
    out = result_type(node)
    neg = cx.compare("LT", x, cx.splat_like(0, x))
    return [cx.select(neg, cx.op("stablehlo.multiply", [x, slope], out), x, out)]


# Unary ops that are one StableHLO op.
_UNARY = rule_op_names("stablehlo", ("Exp", "Log", "Sqrt", "Neg", "Abs", "Tanh", "Sigmoid", "Floor", "Ceil",
                                     "Round", "Sign", "Not", "BitwiseNot", "Sin", "Cos", "Tan"))


@LOWERINGS.register(*_UNARY)
def _unary(cx: Emitter, node: Node):
    return [cx.op(_UNARY[node.op], [arg(cx, node, 0)], result_type(node))]


@LOWERINGS.register("Erf")
def _erf(cx: Emitter, node: Node):
    # StableHLO has no erf; CHLO's (which XLA and JAX use) is the portable form.
    return [_erf_of(cx, arg(cx, node, 0))]


def _erf_of(cx: Emitter, x: str) -> str:
    return cx.emit(f"chlo.erf {x} : {cx.tt(x)} -> {cx.tt(x)}", cx.tt(x))


@LOWERINGS.register("Reciprocal")
def _reciprocal(cx: Emitter, node: Node):
    x = arg(cx, node, 0)
    return [cx.op("stablehlo.divide", [cx.splat_like(1, x), x], result_type(node))]


@LOWERINGS.register("Relu")
def _relu(cx: Emitter, node: Node):
    x = arg(cx, node, 0)
    return [cx.op("stablehlo.maximum", [x, cx.splat_like(0, x)], result_type(node))]


@LOWERINGS.register("LeakyRelu")
def _leaky_relu(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    alpha = attr(node, "alpha", 0.01)
    neg = cx.compare("LT", x, cx.splat_like(0, x))
    return [cx.select(neg, cx.op("stablehlo.multiply", [x, cx.splat_like(alpha, x)], out), x, out)]


@LOWERINGS.register("Elu", "Selu", "Celu")
def _elu(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    default_alpha = {"Elu": 1.0, "Selu": 1.67326319217681884765625, "Celu": 1.0}[node.op]
    alpha = attr(node, "alpha", default_alpha)
    gamma = attr(node, "gamma", 1.05070102214813232421875) if node.op == "Selu" else 1.0
    xs = cx.op("stablehlo.divide", [x, cx.splat_like(alpha, x)], out) if node.op == "Celu" else x
    em1 = cx.emit(f"stablehlo.exponential_minus_one {xs} : {cx.tt(xs)}", cx.tt(xs))
    neg = cx.op("stablehlo.multiply", [em1, cx.splat_like(alpha, x)], out)
    y = cx.select(cx.compare("LT", x, cx.splat_like(0, x)), neg, x, out)
    if gamma != 1.0:
        y = cx.op("stablehlo.multiply", [y, cx.splat_like(gamma, x)], out)
    return [y]


@LOWERINGS.register("HardSigmoid", "HardSwish")
def _hard_sigmoid(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    alpha = attr(node, "alpha", 0.2 if node.op == "HardSigmoid" else 1 / 6)
    beta = attr(node, "beta", 0.5)
    lin = cx.op("stablehlo.add", [cx.op("stablehlo.multiply", [x, cx.splat_like(alpha, x)], out),
                                  cx.splat_like(beta, x)], out)
    y = cx.emit(f"stablehlo.clamp {cx.scalar(0, out.elem)}, {lin}, {cx.scalar(1, out.elem)}"
                f" : (tensor<{out.elem}>, {out}, tensor<{out.elem}>) -> {out}", out)
    return [cx.op("stablehlo.multiply", [x, y], out) if node.op == "HardSwish" else y]


@LOWERINGS.register("Softplus")
def _softplus(cx: Emitter, node: Node):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x.
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    e = cx.emit(f"stablehlo.exponential {cx.op('stablehlo.negate', [cx.op('stablehlo.abs', [x], t)], t)} : {t}", t)
    lp = cx.emit(f"stablehlo.log_plus_one {e} : {t}", t)
    return [cx.op("stablehlo.add", [cx.op("stablehlo.maximum", [x, cx.splat_like(0, x)], t), lp], out)]


@LOWERINGS.register("Softsign")
def _softsign(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    den = cx.op("stablehlo.add", [cx.op("stablehlo.abs", [x], t), cx.splat_like(1, x)], t)
    return [cx.op("stablehlo.divide", [x, den], out)]


@LOWERINGS.register("Gelu")
def _gelu(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    half_x = cx.op("stablehlo.multiply", [x, cx.splat_like(0.5, x)], t)
    if attr(node, "approximate", "none") == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = cx.op("stablehlo.multiply", [cx.op("stablehlo.multiply", [x, x], t), x], t)
        inner = cx.op("stablehlo.add", [x, cx.op("stablehlo.multiply", [x3, cx.splat_like(0.044715, x)], t)], t)
        inner = cx.op("stablehlo.multiply", [inner, cx.splat_like(float(np.sqrt(2 / np.pi)), x)], t)
        s = cx.op("stablehlo.tanh", [inner], t)
    else:
        s = _erf_of(cx, cx.op("stablehlo.multiply", [x, cx.splat_like(float(1 / np.sqrt(2)), x)], t))
    return [cx.op("stablehlo.multiply", [half_x, cx.op("stablehlo.add", [s, cx.splat_like(1, x)], t)], out)]


@LOWERINGS.register("Clip")
def _clip(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    if not params_are_operands(cx.graph, node):
        lo = cx.scalar(attr(node, "min", -np.inf), out.elem)
        hi = cx.scalar(attr(node, "max", np.inf), out.elem)
    else:
        # min and max are scalars: StableHLO's clamp takes scalar bounds as they are.
        lo = cx.v(node.inputs[1]) if has_input(node, 1) else cx.scalar(-np.inf, out.elem)
        hi = cx.v(node.inputs[2]) if has_input(node, 2) else cx.scalar(np.inf, out.elem)
        lo, hi = (cx.reshape(b, TT(out.elem, ())) for b in (lo, hi))  # a [1] bound is a scalar too
    return [cx.emit(f"stablehlo.clamp {lo}, {x}, {hi} : ({cx.tt(lo)}, {cx.tt(x)}, {cx.tt(hi)}) -> {out}", out)]


@LOWERINGS.register("Cast")
def _cast(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    if cx.tt(x) == out:
        return [x]
    return [cx.emit(f"stablehlo.convert {x} : ({cx.tt(x)}) -> {out}", out)]


@LOWERINGS.register("Identity", "Dropout")
def _identity(cx: Emitter, node: Node):
    # Dropout at inference is the identity; its mask, if used, is all true.
    if node.op == "Dropout" and has_input(node, 2):
        mode = cx.known_array(node.inputs[2])
        if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
            raise Unsupported("training mode")
    x = arg(cx, node, 0)
    outs: List[Optional[str]] = [x]
    if node.op == "Dropout" and len(node.outputs) > 1:
        outs.append(cx.splat_like(True, x, "i1") if node.graph.users(node.outputs[1]) else None)
    return outs

