"""A loaded model: its IR plus what the IR does not model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .ir.graph import Graph


@dataclass
class Model:
    graph: Graph
    format: str  # its kind's name (``kinds.registry``): what the report's ``format`` names
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
    # A torch.export program read as its Core ATen graph (a ``kinds.pt2.importer.AtenSource``:
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
