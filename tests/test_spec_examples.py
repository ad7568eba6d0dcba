"""Every example of MLIR's Broadcastable trait page
(https://mlir.llvm.org/docs/Traits/Broadcastable/), under each profile, with the exact
diagnostic. ``test.broadcastable`` becomes ONNX ``Add`` (two operands) or ``Sum`` (one
operand); the element types are the spec's, which the trait does not look at."""

import pytest

from helpers import op_model, verify_proto

OK = []
RANKS = ("operand-rank-mismatch", "operands don't have matching ranks")
UNRANKED = ("unranked-operand", "operand #{} of unknown rank cannot be proved to have the result's rank")
WIDENED = ("result-rank-mismatch", "result type '4x3x2' not broadcast compatible with broadcasted "
           "operands's shapes '3x2': rank 3 vs 2")

# (operands, result, {profile: [(code, message)]}); profiles missing from the dict are OK.
CASES = {
    # -- correct uses --
    "exact static match": (["1x2xi32", "1x2xi32"], "1x2xi32", {}),
    "dynamic sizes match": (["?xi32", "?xi32"], "?xi32", {}),
    "1 broadcast to 4": (["1xi32", "4xi32"], "4xi32", {}),
    "inferred 4, result ?": (["4xi32"], "?xi32", {}),
    "rank expansion": (["4xi32", "2x3x4xi32"], "2x3x4xi32", {
        "tosa": [(RANKS[0], RANKS[1] + ": ('4', '2x3x4') -> '2x3x4'")]}),
    "mixed element types": (["2xi1", "2xi32"], "2xi64", {}),
    "unranked result": (["2xi32"], "*xi32", {}),
    # tosa (and xla) cannot prove an operand of unknown rank legal (issue 16, item 5).
    "all operands unranked": (["*xi32", "*xi32"], "2xi32", {
        "tosa": [(UNRANKED[0], UNRANKED[1].format(i) + ": ('*', '*') -> '2'") for i in (0, 1)]}),
    # -- incorrect uses --
    "static dims differ": (["3xi32", "2xi32"], "?xi32", {
        p: [("incompatible-operands", "operands don't have broadcast-compatible shapes: "
             "operand #0 '3' has 3 at dim 0 but operand #1 '2' has 2 at dim 0")]
        for p in ("mlir", "strict", "tosa")}),
    "result rank differs": (["3xi32", "3xi32"], "1x3xi32", {
        "mlir": [("result-rank-mismatch", "result type '1x3' not broadcast compatible with "
                  "broadcasted operands's shapes '3': rank 2 vs 1")],
        "strict": [("result-rank-mismatch", "result type '1x3' not broadcast compatible with "
                    "broadcasted operands's shapes '3': rank 2 vs 1")],
        "tosa": [("result-rank-mismatch", "result type '1x3' not broadcast compatible with "
                  "broadcasted operands's shapes '3': rank 2 vs 1"),
                 (RANKS[0], RANKS[1] + ": ('3', '3') -> '1x3'")]}),
    # The spec's InferResultShape discards the unranked operand, then the ranks must match
    # (issue 16, item 4; until then an unranked operand widened the inferred rank, as
    # MLIR's C++, which compares only the result's trailing dims, still does).
    "unranked operand, result rank differs": (["3x2xi32", "3x2xi32", "*xi32"], "4x3x2xi32", {
        "mlir": [WIDENED], "strict": [WIDENED],
        "tosa": [WIDENED, (UNRANKED[0], UNRANKED[1].format(2) + ": ('3x2', '3x2', '*') -> '4x3x2'"),
                 (RANKS[0], RANKS[1] + ": ('3x2', '3x2', '*') -> '4x3x2'")]}),
    # The spec's table allows this (mlir); its pseudo-code and examples do not (strict).
    "inferred ?, result 4": (["?xi32", "?xi32"], "4xi32", {
        "strict": [("result-dynamic-to-static", "result type '4' not broadcast compatible with "
                    "broadcasted operands's shapes '?': dim 0 is static 4 in the result but "
                    "dynamic ? in the broadcast")]}),
    "inferred 2, result 4": (["2xi32", "2xi32"], "4xi32", {
        p: [("result-incompatible", "result type '4' not broadcast compatible with broadcasted "
             "operands's shapes '2': dim 0 is 4 in the result but 2 in the broadcast")]
        for p in ("mlir", "strict", "tosa")}),
    "no result broadcasting": (["1xi32", "1xi32"], "4xi32", {
        p: [("result-incompatible", "result type '4' not broadcast compatible with broadcasted "
             "operands's shapes '1': dim 0 is 4 in the result but 1 in the broadcast")]
        for p in ("mlir", "strict", "tosa")}),
}


@pytest.mark.parametrize("profile", ["mlir", "strict", "tosa"])
@pytest.mark.parametrize("case", list(CASES))
def test_spec_example(case, profile):
    operands, result, expected = CASES[case]
    op = "Add" if len(operands) == 2 else "Sum"
    res = verify_proto(op_model(op, operands, result), profile)
    got = [(d.code, d.message) for d in res.violations]
    assert got == expected.get(profile, [])
    for d in res.violations:
        assert d.node == "n0" and d.op == op
        assert str(d) == f"error: node 'n0': '{op}' op {d.message}"


def test_spec_dims_named():
    res = verify_proto(op_model("Add", ["4x3x2xi32", "2xi32"], "4x3x3xi32"))
    (d,) = res.violations
    assert d.dim == 2
    assert d.message == ("result type '4x3x3' not broadcast compatible with broadcasted operands's "
                         "shapes '4x3x2': dim 2 is 3 in the result but 2 in the broadcast")
    assert d.to_json()["operand_shapes"] == [["4", "3", "2"], ["2"]]
    assert d.to_json()["result_shape"] == ["4", "3", "3"]


def test_dynamic_broadcast_becomes_constraint():
    res = verify_proto(op_model("Add", ["2x?xf32", "?x?xf32"], "2x?xf32"))
    assert res.ok
    assert [c["text"] for c in res.constraints.to_json()] == [
        "arg1[0] == 2 or arg1[0] == 1",
        "arg0[1] == arg1[1] or arg0[1] == 1 or arg1[1] == 1",
    ]


def test_symbols_equal_and_different():
    same = verify_proto(op_model("Add", ["Nx3xf32", "Nx3xf32"], "Nx3xf32"))
    assert same.ok and len(same.constraints) == 0
    diff = verify_proto(op_model("Add", ["Nx3xf32", "Mx3xf32"], "?x3xf32"))
    assert diff.ok
    assert [c["text"] for c in diff.constraints.to_json()] == ["M == N or M == 1 or N == 1"]
    # Different symbols are never assumed equal: the result cannot be claimed static.
    strict = verify_proto(op_model("Add", ["Nx3xf32", "Mx3xf32"], "5x3xf32"), "strict")
    assert [d.code for d in strict.violations] == ["result-dynamic-to-static"]


def test_shape_expressions_are_symbols():
    # Expressions that shape inference writes as dim_params ('4*B', 'S+1') are symbols:
    # the same expression is the same size; different ones are never assumed equal.
    same = verify_proto(op_model("Add", ["S+1x4*Bxf32", "S+1x1xf32"], "S+1x4*Bxf32"))
    assert same.ok and len(same.constraints) == 0
    diff = verify_proto(op_model("Add", ["S+1x3xf32", "Sx3xf32"], "?x3xf32"))
    assert [c["text"] for c in diff.constraints.to_json()] == ["S == S+1 or S == 1 or S+1 == 1"]
    static = verify_proto(op_model("Mul", ["4*Bxf32", "8xf32"], "8xf32"))
    assert [c["text"] for c in static.constraints.to_json()] == ["4*B == 8 or 4*B == 1"]
