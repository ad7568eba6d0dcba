"""Operands whose rank stays unknown: the legalized model that cannot be proved legal says
why (the rank depends on values at run time), not that legalize has a bug."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.api import NotLegal
from tests.helpers import cli_in_process


def value_ranked(tmp_path):
    """ConstantOfShape of a runtime shape (its rank is the shape's length, a value) + c."""
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["u", "c"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "unranked.onnx"
    onnx.save(m, str(path))
    return path


def test_the_cli_says_the_rank_depends_on_values(tmp_path):
    code, out, err = cli_in_process(value_ranked(tmp_path), "-q")
    assert code == 1
    assert ("the legalized model has 1 violation under 'tosa' (unprovable: an operand of 'add' has a rank that"
            " depends on values at run time, which no rank rule evaluates); nothing written") in out
    assert "legalize bug" not in out + err


def test_the_api_says_so_too(tmp_path):
    with pytest.raises(NotLegal, match="unprovable: an operand of 'add' has a rank that depends on values"):
        legalizer.legalize(onnx.load(str(value_ranked(tmp_path))), "tosa")
