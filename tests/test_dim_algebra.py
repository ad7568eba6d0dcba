"""The dim algebra against numpy: static shapes exactly, dynamic ones under every
runtime binding."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from legalizer.shapes import (IncompatibleDims, broadcast_constraint, infer_dim,
                              infer_result_shape)

static_dim = st.sampled_from([0, 1, 1, 2, 3, 4])
static_shape = st.lists(static_dim, min_size=0, max_size=5).map(tuple)


@settings(max_examples=500, deadline=None)
@given(st.lists(static_shape, min_size=1, max_size=4))
def test_static_shapes_match_numpy(shapes):
    try:
        expected = np.broadcast_shapes(*shapes)
    except ValueError:
        expected = None
    try:
        got = infer_result_shape(shapes)
    except IncompatibleDims:
        assert expected is None
        return
    assert got.shape == expected
    assert got.constraints == []


def test_infer_dim_table():
    # The spec's table, both orders; "?" as None and as a symbol.
    for q in (None, "N"):
        assert infer_dim(q, q) == q
        assert infer_dim(q, 1) == q and infer_dim(1, q) == q
        assert infer_dim(q, 5) == 5 and infer_dim(5, q) == 5
    assert infer_dim("N", "M") is None and infer_dim(None, "N") is None
    assert infer_dim(1, 1) == 1
    assert infer_dim(1, 5) == 5 and infer_dim(5, 1) == 5
    assert infer_dim(5, 5) == 5
    with pytest.raises(ValueError):
        infer_dim(5, 3)


def test_constraints():
    assert broadcast_constraint("N", 1, "N", "1") is None
    assert broadcast_constraint("N", "N", "N", "N") is None
    assert broadcast_constraint("N", 4, "N", "4").text == "N == 4 or N == 1"
    assert broadcast_constraint(4, None, "4", "x[0]").text == "x[0] == 4 or x[0] == 1"
    a = broadcast_constraint("N", "M", "N", "M")
    b = broadcast_constraint("M", "N", "M", "N")
    assert a == b and a.text == "M == N or M == 1 or N == 1"


# -- dynamic and symbolic dims -------------------------------------------------------
# Each operand dim is static (1, 2, 3), a symbol (N, M) or anonymous (None, labelled
# by operand and axis). For every runtime binding of the dynamic dims, numpy decides
# whether the broadcast is defined and what it gives; the inference must agree.

dyn_dim = st.sampled_from([1, 2, 3, "N", "M", None])
dyn_shape = st.lists(dyn_dim, min_size=0, max_size=3).map(tuple)


def _env(bind):
    env = {"broadcast": lambda a, b: a if b == 1 else b}
    env.update(bind)
    return env


@settings(max_examples=300, deadline=None)
@given(st.lists(dyn_shape, min_size=1, max_size=3))
def test_symbolic_rules_against_numpy(shapes):
    labels = [[d if isinstance(d, str) else (str(d) if d is not None else f"x{i}[{k}]")
               for k, d in enumerate(s)] for i, s in enumerate(shapes)]
    names = sorted({lab for s, ls in zip(shapes, labels) for d, lab in zip(s, ls) if not isinstance(d, int)})
    try:
        inf = infer_result_shape(shapes, labels)
    except IncompatibleDims:
        inf = None
    for values in itertools.product([1, 2, 3], repeat=len(names)):
        bind = dict(zip(names, values))
        concrete = [tuple(d if isinstance(d, int) else bind[lab] for d, lab in zip(s, ls))
                    for s, ls in zip(shapes, labels)]
        try:
            expected = np.broadcast_shapes(*concrete)
        except ValueError:
            expected = None
        if inf is None:  # a static clash: no binding can make it broadcast
            assert expected is None
            continue
        env = {"broadcast": lambda a, b: a if b == 1 else b}
        for name, value in bind.items():
            if "[" in name:  # x0[1] -> x0 = {1: value}
                var, axis = name[:-1].split("[")
                env.setdefault(var, {})[int(axis)] = value
            else:
                env[name] = value
        holds = all(eval(c.text, {}, env) for _, c in inf.constraints)  # noqa: S307
        assert holds == (expected is not None), (shapes, bind, [c.text for _, c in inf.constraints])
        if expected is None:
            continue
        assert len(inf.shape) == len(expected)
        for d, e in zip(inf.shape, expected):
            if isinstance(d, int):
                assert d == e
            elif isinstance(d, str):
                assert bind[d] == e
