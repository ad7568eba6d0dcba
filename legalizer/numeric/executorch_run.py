"""The legal ``.pt2`` as ExecuTorch deploys it: lowered with ``to_edge_transform_and_lower``
and the XNNPACK partitioner, and the ``.pte`` run on ExecuTorch's runtime, against
PyTorch running the original program, at the check's bindings. As IREE's modules are,
it is lowered in the compile child and run in the run child, each with every runtime's
limits (``child.py``). ExecuTorch is the optional ``executorch`` extra; without it the
result says it did not run, naming the extra.

A program with dynamic dims is lowered at its first binding's shapes (its dims made
static: ExecuTorch plans memory for bounded shapes) and run there: each lowering takes
seconds, and PyTorch's check covers every binding; the report lists the one run.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import CheckUnavailable, first_line
from ..extras import importable, install_hint
from .compare import unless_compared
from .plan import Artifact, Plan, run_plan
from .results import CheckResult
from .runner import Runner, positional
from .settings import CheckSettings, settings_of

PROVIDER = "ExecuTorch (XNNPACK)"


def installed() -> bool:
    return importable("executorch.runtime")


def lower(program, shapes: Optional[Sequence[Sequence[int]]] = None) -> bytes:
    """``program`` (an ``ExportedProgram``) lowered with ``to_edge_transform_and_lower``
    and the XNNPACK partitioner: the ``.pte``'s bytes. ``shapes``: its user inputs'
    shapes, at which its module is exported again first (its dims made static)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from ..kinds.pt2.importer import user_inputs

    if shapes is not None:
        vals = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
        args = tuple(torch.zeros(tuple(s), dtype=vals[name].dtype) for name, s in zip(user_inputs(program), shapes))
        program = torch.export.export(program.module(), args)
    return bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


class Lowerer:
    """``lower`` as the compile child serves it (``child.COMPILE``: ExecuTorch writes
    temporary files as it serializes, which the run child's filter refuses): the legal
    ``.pt2`` at ``path``, read by the safe loader."""

    runtime = "ExecuTorch's lowering (XNNPACK)"

    def __init__(self, path: str):
        from pathlib import Path

        from ..kinds.pt2.safety import load_untrusted

        self.program = load_untrusted(Path(path))

    def dynamic(self) -> bool:
        return bool(self.program.range_constraints)

    def lower(self, shapes=None) -> bytes:
        return lower(self.program, shapes)


class Pte:
    """A ``.pte`` loaded on ExecuTorch's runtime, in the run child. The Program that
    ``load_program`` gives owns the data and the method's memory arenas: it is kept as
    long as the method, which reads them (a chained ``load_program(...).load_method``
    frees them under it)."""

    runtime = "ExecuTorch"

    def __init__(self, pte: bytes):
        from executorch.runtime import Runtime

        self.program = Runtime.get().load_program(pte)
        self.method = self.program.load_method("forward")

    def run(self, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
        import torch

        outs = self.method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        return [np.asarray(o) for o in outs]


class ExecutorchRunner(Runner):
    """The legal ``.pt2`` at ``path`` as ExecuTorch deploys it: lowered in the compile
    child (once, or per binding's shapes for a program with dynamic dims), its ``.pte``
    run in the run child, fed by the declared names of its user inputs
    (``input_names``, in its flat order)."""

    name = "executorch"

    def __init__(self, path: str, input_names: Sequence[str]):
        super().__init__()
        self.path, self.input_names = path, list(input_names)
        self.lowerer = None
        self.dynamic = False
        self._ptes: Dict[Optional[tuple], object] = {}  # input shapes (None: static) -> its Remote Pte

    def activate_impl(self) -> None:
        from .child import COMPILE, Remote

        self.lowerer = Remote(Lowerer, self.path, model=self.path, pool=COMPILE)
        self.dynamic = bool(self.lowerer.call("dynamic"))
        if not self.dynamic:
            self._pte(None)  # what does not lower or load fails here, as a model that does not load

    def input_specs(self):
        raise NotImplementedError("the parent makes the inputs from the program's declaration")

    def _pte(self, shapes: Optional[tuple]):
        from .child import Remote

        if shapes not in self._ptes:
            pte = self.lowerer.call("lower", None if shapes is None else [list(s) for s in shapes])
            self._ptes[shapes] = Remote(Pte, pte, model=self.path, runtime="ExecuTorch")
        return self._ptes[shapes]

    def prepare(self, feed: Mapping[str, np.ndarray]) -> None:
        """Lower (and load) the program for ``feed``'s shapes now: what does not lower
        raises here, before any comparison, as a program ExecuTorch does not take."""
        self._pte(self._key(feed))

    def _key(self, feed: Mapping[str, np.ndarray]) -> Optional[tuple]:
        return tuple(tuple(np.shape(feed[n])) for n in self.input_names) if self.dynamic else None

    def infer_impl(self, feed: Mapping[str, np.ndarray]):
        inputs = [np.asarray(feed[n]) for n in self.input_names]
        return positional(self._pte(self._key(feed)).call("run", inputs))

    def deactivate_impl(self) -> None:
        for remote in list(self._ptes.values()) + [self.lowerer]:
            if remote is not None:
                remote.close()
        self._ptes.clear()
        self.lowerer = None


def check_executorch(original, declared, input_names: Sequence[str], legalized_path,
                     settings: Optional[CheckSettings] = None, *, dims: Optional[Mapping[str, int]] = None,
                     inputs: Optional[Mapping[str, np.ndarray]] = None,
                     choices: Optional[Mapping[str, List[int]]] = None, **changes) -> CheckResult:
    """ExecuTorch running the legal ``.pt2`` at ``legalized_path`` as a ``.pte`` (XNNPACK)
    against PyTorch running ``original`` (an ``ExportedProgram``), at the first of the
    bindings and inputs ``torch_ref.check_programs`` makes (``declared``, ``input_names``:
    as there). Not run (``ran`` false, the reason naming the extra) without ExecuTorch; a
    program ExecuTorch does not lower or load, or a run that faults, did not run either."""
    settings = settings_of(settings, **changes)
    if not installed():
        return CheckResult(False, PROVIDER, error=f"ExecuTorch is not installed: {install_hint('executorch')}")
    return run_plan(_executorch_plan(original, declared, input_names, legalized_path, settings, dims=dims,
                                     inputs=inputs, choices=choices))


def _executorch_plan(original, declared, input_names: Sequence[str], legalized_path, settings: CheckSettings, *,
                     dims, inputs, choices) -> Plan:
    from .torch_ref import against_original, program_feeds

    feeds = program_feeds(declared, settings, dims, inputs, choices)[:1]  # (one lowering: the module docstring)

    def lowered(runner: ExecutorchRunner) -> None:
        # lowered for each binding before any run: a program it does not take did not run, differs in nothing
        for feed in feeds:
            runner.prepare(feed.inputs())

    def refused(e: BaseException, _) -> CheckResult:
        if isinstance(e, CheckUnavailable):  # (the inputs cannot be made)
            return CheckResult(False, PROVIDER, error=str(e))
        return CheckResult(False, PROVIDER,
                           error=f"ExecuTorch does not lower or load the legal program: {first_line(e)}")

    new = Artifact("the .pte", lambda: ExecutorchRunner(str(legalized_path), list(input_names)), loaded=lowered,
                   refused=refused)
    return Plan([against_original(original, declared, input_names, new, feeds, "the .pte")], settings.rtol,
                settings.atol, PROVIDER,
                lambda result: unless_compared(result, "ExecuTorch fails on every input binding tried: "))
