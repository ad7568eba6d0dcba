"""The inputs every check feeds: per input a spec (``InputSpec``: its element type and
per axis a size or the key of a dynamic dim), and from specs, a dim binding and the
arrays the user gave, the arrays themselves, drawn per dtype with a fixed seed.

Floats are standard normal, integers 1 or 2 (safe as divisors, exponents and most
indices), booleans fair coins; a quantized integer input spans its whole range. An
input too big or of too high a rank to hold in memory is not made (``too_big``): the
check says why instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import helper

from ..errors import CheckUnavailable

SMALL = 3  # the "small size" a dynamic dim gets besides 1
# The check makes its inputs in memory: one bigger than this, or of a rank numpy cannot
# hold, is not made (the check does not run, and says why) rather than tried.
MAX_INPUT_BYTES = 1 << 30
MAX_INPUT_RANK = 32


@dataclass(frozen=True)
class InputSpec:
    """One input as a runner declares it."""

    name: str
    elem_type: int  # ONNX element type code
    shape: Tuple[Union[int, str], ...]  # a static size, or the key of a dynamic dim, per axis
    quantized: bool = False  # an integer input of a quantized model: drawn over its whole range
    unavailable: str = ""  # why the check cannot make it (it can still be given)


def dim_key(name: str, axis: int) -> str:
    """The key of an anonymous dynamic dim: ``input[axis]``."""
    return f"{name}[{axis}]"


def too_big(name: str, elem_type: int, shape) -> Optional[str]:
    """Why an input of this shape is not made, or None."""
    if len(shape) > MAX_INPUT_RANK:
        return f"input '{name}' has rank {len(shape)}, more than the check makes ({MAX_INPUT_RANK})"
    if any(d < 0 for d in shape):
        return f"input '{name}' has a negative dim in shape {list(shape)}"
    count = 1
    for d in shape:
        count *= int(d)
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(elem_type).itemsize or 8
    except (KeyError, ValueError, TypeError):
        itemsize = 8
    if count * itemsize > MAX_INPUT_BYTES:
        return (f"input '{name}' of shape {list(shape)} would take {count * itemsize / 2**30:.3g} GiB, more than"
                f" the check makes ({MAX_INPUT_BYTES >> 30} GiB); bind its dims with --dim or give it with --input")
    return None


def random_array(rng, elem_type: int, shape, name: str = "?", quantized: bool = False) -> np.ndarray:
    """One synthesized input (``CheckUnavailable`` when ``too_big``)."""
    why = too_big(name, elem_type, shape)
    if why is not None:
        raise CheckUnavailable(why)
    if elem_type == onnx.TensorProto.STRING:
        words = np.array(["alpha", "beta", "gamma", "delta"], dtype=object)
        return rng.choice(words, size=shape)
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    if quantized and dtype.kind in "iu":
        info = np.iinfo(dtype)  # the whole quantized range, not just 1..2
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    # np.asarray: a rank-0 draw is a numpy scalar, which onnxruntime does not take.
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        return np.asarray(rng.integers(1, 3, size=shape), dtype)
    return np.asarray(rng.standard_normal(shape), dtype)


def make_feeds(specs: Sequence[InputSpec], dims: Mapping[str, int], given: Mapping[str, np.ndarray],
               seed: int = 0) -> Dict[str, np.ndarray]:
    """An array per spec: the given one, else one drawn at the sizes ``dims`` binds
    (``SMALL`` for a dim it leaves out), in order, from one generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    feeds: Dict[str, np.ndarray] = {}
    for s in specs:
        if s.name in given:
            feeds[s.name] = np.asarray(given[s.name])
            continue
        if s.unavailable:
            raise CheckUnavailable(s.unavailable)
        shape = tuple(d if isinstance(d, int) else dims.get(d, SMALL) for d in s.shape)
        feeds[s.name] = random_array(rng, s.elem_type, shape, s.name, s.quantized)
    return feeds


QUANTIZED_INPUTS = ("int8", "uint8", "int16")  # the quantized dtypes a graph input is drawn over whole


def graph_input_specs(graph) -> List[InputSpec]:
    """The specs of an IR graph's inputs (a TFLite subgraph, an MLIR ``@main``): a
    dynamic dim keyed ``input[axis]``."""
    from ..ir.dtypes import elem_type as elem_type_of  # (here: the IR is not loaded where models run)

    out = []
    for n in graph.inputs:
        v = n.output
        if v.type.shape is None or v.type.dtype is None:
            out.append(InputSpec(v.name, 0, (), unavailable=f"input '{v.name}' has no known rank or type;"
                                                              " give it with --input"))
            continue
        out.append(InputSpec(v.name, elem_type_of(v.type.dtype),
                             tuple(d if isinstance(d, int) else dim_key(v.name, a) for a, d in enumerate(v.type.shape)),
                             v.quant is not None and v.type.dtype in QUANTIZED_INPUTS))
    return out


def graph_declared(graph) -> List[Tuple[str, Optional[List[Union[int, str]]]]]:
    """An IR graph's inputs as ``user_inputs.Declared`` describes a model's: per input,
    its name and per axis its static size or its dim key (``input[axis]``)."""
    return [(n.output.name, None if n.output.type.shape is None else
             [d if isinstance(d, int) else dim_key(n.output.name, a) for a, d in enumerate(n.output.type.shape)])
            for n in graph.inputs]


def static_or_key(name: str, shape: Sequence[Optional[int]]) -> Tuple[Union[int, str], ...]:
    """A runtime's declared shape (a negative or missing size for a dynamic dim) with
    each dynamic dim keyed ``input[axis]``."""
    return tuple(d if isinstance(d, int) and d >= 0 else dim_key(name, a) for a, d in enumerate(shape))


# A dynamic dim is checked at a small size, then at 1 (where runtime broadcasting runs).
SIZES = (SMALL, 1)


def small_then_one(keys: Sequence[str], fixed: Mapping[str, int]) -> List[Dict[str, int]]:
    """Two bindings of the dim ``keys``: each at ``SMALL``, then each at 1 (the second
    left out when ``fixed`` binds them all); ``fixed`` binds a dim in both."""
    if not keys:
        return [{}]
    return [{k: int(fixed.get(k, size)) for k in keys} for size in SIZES if size != SIZES[-1] or
            any(k not in fixed for k in keys)]
