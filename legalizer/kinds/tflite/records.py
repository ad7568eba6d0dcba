"""What the IR keeps of an imported TFLite model for the exporter to write it back: the
op domains, the TFLite tensor type codes, and the records the importer leaves on a node
(``OpRecord``) and on the model (``TFLiteSource``). Below both the importer and the
exporters, which must not import each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np

if TYPE_CHECKING:  # (an ONNX run, which imports the domains, never loads flatbuffers)
    from .schema import FbTable

TFLITE_DOMAIN, CUSTOM_DOMAIN = "tflite", "tflite.custom"

# TFLite TensorType -> IR dtype name (ONNX's, lower-cased), and back.
DTYPES = {0: "float", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool",
          7: "int16", 8: "complex64", 9: "int8", 10: "double", 11: "complex128", 12: "uint64",
          15: "uint32", 16: "uint16", 17: "int4", 18: "bfloat16"}
TFLITE_TYPES = {v: k for k, v in DTYPES.items()}


@dataclass(slots=True)
class OpRecord:
    """What an imported operator keeps besides its operands and options: its
    OperatorCode (version, custom code), the rest of its Operator table, and which
    options table its ``attrs`` came from."""

    opcode: FbTable
    rest: FbTable
    options_table: Optional[str] = None


@dataclass
class TFLiteSource:
    """``Model.proto`` of a TFLite model: the file's Model table less its subgraphs,
    whose buffers are views of the file."""

    table: FbTable
    size: int
    # each subgraph's input and output tensor indices, which signatures refer to
    io: List[Tuple[List[int], List[int]]]
    # buffer index -> its bytes (a view of the file) for buffers stored by offset after
    # the flatbuffer (Buffer.offset/size, how models over 2 GB are laid out): the
    # exporter writes them back the same way
    external: Dict[int, np.ndarray] = field(default_factory=dict)
