"""A loaded model: its IR plus what the IR does not model."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .ir.graph import Graph


class SourceFormat(str, enum.Enum):
    """The format a model was read from (a ``.pt2`` is read as its ONNX export: ONNX).
    Equal to its lower-case name as a string (``SourceFormat.ONNX == "onnx"``). What the
    job does differently by input kind is in ``formats.FORMATS``."""

    def __new__(cls, value: str, every_subgraph: bool = False, records_constraints: bool = False):
        member = str.__new__(cls, value)
        member._value_ = value
        # ``legalize`` rewrites each top-level graph (TFLite's subgraphs: no opsets, no
        # legacy forms), not the one graph at its opset.
        member.every_subgraph = every_subgraph
        # ``legalize`` records the runtime constraints of the graph it is given (what the
        # xla form's StableHLO asserts), unless the pipeline has.
        member.records_constraints = records_constraints
        return member

    ONNX = ("onnx", False, True)
    TFLITE = ("tflite", True, False)
    MLIR = ("mlir", False, False)  # text or bytecode: TOSA or StableHLO
    PT2 = ("pt2", True, False)  # a torch.export program's Core ATen graph (importers.aten)

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


@dataclass
class Model:
    graph: Graph
    format: SourceFormat
    proto: Any = None  # the imported ModelProto (header fields, functions, ...)
    base_dir: Optional[Path] = None  # where external data is resolved
    source: Optional[Path] = None
    warnings: List[str] = field(default_factory=list)
    # A TFLite model's subgraphs in file order (signatures, WHILE/IF bodies called by
    # index); ``graph`` is subgraphs[0]. Empty for ONNX, which has one top-level graph.
    subgraphs: List[Graph] = field(default_factory=list)
    # A model exported from PyTorch (a .pt2, an nn.Module): its TorchSource (the
    # program, its original ONNX export), the check's reference. None otherwise.
    torch: Any = None
    # A torch.export program read as its Core ATen graph (an ``importers.aten.AtenSource``:
    # the program the exporter writes the legal form with). None otherwise.
    aten: Any = None
    # The runtime constraints (a ConstraintSet) of the graph before ``legalize`` rewrote
    # it, which the report lists: the xla form's StableHLO asserts them. None until then.
    constraints: Any = None
    # What ``legalizer.legalize`` changed in this model (a ``target_passes.LegalizeResult``:
    # stats, warnings); None until then.
    legalized: Any = None

    @property
    def graphs(self) -> List[Graph]:
        """Every top-level graph, ``graph`` first."""
        return list(self.subgraphs) if self.subgraphs else [self.graph]

    @property
    def opsets(self) -> Dict[str, int]:
        return self.graph.opsets
