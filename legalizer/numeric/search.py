"""The search for dim bindings the original accepts, when it rejects every synthesized
one (sizes 3 and 1): audio and sequence models whose dynamic dims must be large (a
window of 512 samples, a conv stack that shrinks the time axis) or of a given size.

Candidate sizes, in this order, each tried on one dynamic dim at a time (the last axes
first: a leading dim is usually a batch, which any size fits), then on all of them:

1. sizes the original's own error names (``requested shape:{3,-1,512}``; ``W: {400,8}``),
   from the synthesized failures and from each failed try, as they come;
2. per dim: the bounds of its range (a ``.pt2`` program's range constraints) and a size
   its name carries (``seq_512``, ``n_fft=400``);
3. the constant sizes the graph reshapes, slices or convolves to (Reshape targets, Slice
   starts and ends, Conv and pooling kernels);
4. growing sizes, powers of two, until the input would pass the check's 1 GiB cap;
5. last, the sizes of errors already seen with other numbers. The same error again at
   another binding is the same failure: its new numbers follow the binding tried (a
   reflect pad of 64 "exceeds maximum allowed (63)" at a window of 64, then 62 at 63,
   ...: silero-vad's window, 64 more tries per step down), not sizes the model asks for.

The search is bounded: ``MAX_TRIES`` runs of the original and ``MAX_SECONDS``.
"""

from __future__ import annotations

import re
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

MAX_TRIES = 256
MAX_SECONDS = 20.0
MAX_SIZE = 1 << 40  # a dim in no input big enough to meet the byte cap stops here
_MAX_NAMED = 8  # sizes taken from one error message / the graph's constants
_MAX_CONSTANTS = 16


class TooBig(Exception):
    """The inputs of a binding would pass the check's cap, or its run would pass the
    search's memory ceiling: not tried."""


# A grown size can make an intermediate far bigger than any input (attention is
# seq x seq): each probe runs under an address-space ceiling this far above what the
# process holds (at most half the memory available), so that a size too big fails
# there, as too big, instead of taking the machine's memory.
PROBE_MEMORY = 2 << 30
_OUT_OF_MEMORY = ("bad_alloc", "Failed to allocate memory", "out of memory")


def _meminfo(field_name: str, path: str) -> Optional[int]:
    """A ``kB`` field of a /proc status file, in bytes (None where there is none)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextmanager
def memory_ceiling(extra: int = PROBE_MEMORY) -> Iterator[None]:
    """Lower the soft address-space limit to the process's size plus ``extra`` (or half
    the available memory, if less) for the block, then put it back. Where the platform
    has no such limit (no /proc, no RLIMIT_AS), the block runs unbounded."""
    try:
        import resource
    except ImportError:  # not POSIX
        yield
        return
    size, available = _meminfo("VmSize", "/proc/self/status"), _meminfo("MemAvailable", "/proc/meminfo")
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    ceiling = size + min(extra, available // 2 if available else extra)
    if soft != resource.RLIM_INFINITY:
        ceiling = min(ceiling, soft)
    if hard != resource.RLIM_INFINITY:
        ceiling = min(ceiling, hard)
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _probe(run: "Run", binding: Dict[str, int]) -> Optional[str]:
    """``run(binding)`` under the memory ceiling; running out of memory is TooBig."""
    try:
        with memory_ceiling():
            error = run(binding)
    except MemoryError:
        raise TooBig from None
    if error is not None and any(word in error for word in _OUT_OF_MEMORY):
        raise TooBig
    return error


class _Spent(Exception):
    """The search's tries or time are spent."""


@dataclass
class SearchResult:
    tried: int  # runs of the original
    found: Optional[Dict[str, int]] = None  # the first binding it accepted
    stopped: str = ""  # why it gave up: "tries", "time", or "" (no candidate left)
    limit: str = ""  # the limit it stopped at, in words
    seconds: float = 0.0
    # Per dim, the sizes to check at: the one found, and 1 where the check would try 1.
    choices: Dict[str, List[int]] = field(default_factory=dict)
    rejected: Set[Tuple] = field(default_factory=set)  # bindings (``signature``) the original rejects

    def knows_rejected(self, binding: Mapping[str, int]) -> bool:
        return signature(binding) in self.rejected

    def to_json(self) -> dict:
        return {"tried": self.tried, "found": self.found}

    def summary(self) -> str:
        if self.found is not None:
            dims = ", ".join(f"{k}={v}" for k, v in self.found.items())
            return f"{self.tried} tr{'y' if self.tried == 1 else 'ies'} found {dims}"
        limit = f" (its limit of {self.limit})" if self.limit else ""
        return f"{self.tried} more bindings tried{limit}, none accepted"


# -- candidate sizes ------------------------------------------------------------------

# What in an error message is not a size: a source location (reshape_helper.h:84), a
# quoted name (node 'conv_3'), onnxruntime's status prefix ([ONNXRuntimeError] : 2 : ...).
_NOT_SIZES = re.compile(r"[\w./-]+\.(?:h|hpp|cc|cpp|c|cu|py):\d+|'[^']*'|\"[^\"]*\"|\[ONNXRuntimeError\][^A-Za-z]*"
                        r"|\b(?:axis|Axis|opset|version|line)\s*[=:]?\s*-?\d+")
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")


def sizes_in_error(text: str) -> List[int]:
    """The sizes an error message names, in order: ``Input shape:{3,3}, requested
    shape:{3,-1,512}`` -> [3, 512]; ``GEMM: Dimension mismatch, W: {400,8} K: 3`` ->
    [400, 8, 3]. Numbers below 2 are no sizes worth trying."""
    out: List[int] = []
    for m in _INT.finditer(_NOT_SIZES.sub(" ", text)):
        n = int(m.group())
        if 2 <= n <= MAX_SIZE and n not in out:
            out.append(n)
    return out[:_MAX_NAMED]


_NAMED = re.compile(r"[_=:\-](\d+)$")


def sizes_in_name(key: str) -> List[int]:
    """A size a dim's name carries after a separator: ``seq_512``, ``n_fft=400``. Not
    the numbers of generated names (torch's ``s77``, onnx's ``unk__12``)."""
    if key.startswith("unk__"):
        return []
    m = _NAMED.search(key)
    return [int(m.group(1))] if m and 2 <= int(m.group(1)) <= MAX_SIZE else []


def sizes_in_range(lower: int, upper: Optional[int]) -> List[int]:
    """The bounds of a dim's range (``[512, inf)`` -> [512]) worth trying."""
    return [n for n in (lower, upper) if n is not None and 2 <= n <= MAX_SIZE]


def _constant_ints(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    """Small integer constants of ``graph`` (initializers and Constant nodes) by name:
    the shapes, starts and ends its nodes take. External data is never read here."""
    out: Dict[str, np.ndarray] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and \
                t.data_location != onnx.TensorProto.EXTERNAL and len(t.dims) <= 1 and \
                (not t.dims or t.dims[0] <= 16):
            try:
                out[name] = numpy_helper.to_array(t).reshape(-1)
            except (ValueError, TypeError):
                continue
    return out


_KERNELS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger", "QLinearConv")


def graph_sizes(model: onnx.ModelProto) -> List[int]:
    """Constant sizes the main graph reshapes, slices or convolves to, in node order:
    a Reshape target's positive entries (and their product, which a ``-1`` dim must be a
    multiple of), Slice starts and ends, kernel sizes (attributes or Conv weights)."""
    graph = model.graph
    consts = _constant_ints(graph)
    weights = {t.name: list(t.dims) for t in graph.initializer}
    out: List[int] = []

    def add(values: Iterable[int]) -> None:
        for v in values:
            v = int(v)
            if 2 <= v <= MAX_SIZE and v not in out:
                out.append(v)

    for node in graph.node:
        ins = list(node.input)
        if node.op_type == "Reshape" and len(ins) > 1 and ins[1] in consts:
            positive = [int(v) for v in consts[ins[1]] if v > 0]
            add(positive)
            if len(positive) > 1:
                add([int(np.prod(positive))])
        elif node.op_type == "Slice" and len(ins) > 2:
            add(v for name in ins[1:3] if name in consts for v in consts[name] if 0 < v < 2**31 - 1)
        elif node.op_type in _KERNELS:
            kernel = [list(a.ints) for a in node.attribute if a.name == "kernel_shape"]
            if kernel:
                add(kernel[0])
            elif len(ins) > 1 and ins[1] in weights:
                add(weights[ins[1]][2:])
        if len(out) >= _MAX_CONSTANTS:
            break
    return out[:_MAX_CONSTANTS]


# -- the search -----------------------------------------------------------------------

Run = Callable[[Dict[str, int]], Optional[str]]


def signature(binding: Mapping[str, int]) -> Tuple:
    return tuple(sorted(binding.items()))


class _Search:
    """One search's state: the bindings done, the candidate moves queued (a size for one
    dim, or None: each dim, then all), the errors seen and the sizes found too big."""

    def __init__(self, keys: Sequence[str], base: Mapping[str, int], run: Run,
                 tried: Iterable[Mapping[str, int]], max_tries: int, seconds: float):
        self.t0 = time.monotonic()
        self.keys, self.base, self.run = keys, base, run
        self.max_tries, self.seconds = max_tries, seconds
        self.result = SearchResult(0, rejected={signature(b) for b in tried})
        self.done = set(self.result.rejected)
        self.queued: Set[int] = set()
        self.moves: Deque[Tuple[int, Optional[str]]] = deque()  # (size, one dim, or None: each dim, then all)
        self.echoes: Deque[int] = deque()  # sizes of errors seen before with other numbers: tried last
        self.seen: Set[str] = set()  # the errors seen, their numbers masked
        self.capped: Dict[Optional[str], int] = {}  # per dim (None: all together), the size found too big
        self.power = 2  # the next growing size

    def learn(self, text: str) -> None:
        new = [s for s in sizes_in_error(text) if s not in self.queued]
        self.queued.update(new)
        form = _INT.sub("#", text)
        if form in self.seen:
            self.echoes.extend(new)
            return
        self.seen.add(form)
        self.moves.extendleft((s, None) for s in reversed(new))

    def attempt(self, key: Optional[str], size: int) -> bool:
        """Runs the binding of ``size`` to ``key`` (None: to every dim); True when the
        original accepts it. Raises _Spent at the search's limits."""
        result = self.result
        if size >= self.capped.get(key, MAX_SIZE + 1):
            return False
        binding = dict(self.base)
        binding.update({k: size for k in self.keys} if key is None else {key: size})
        sig = signature(binding)
        if sig in self.done:
            return False
        if result.tried >= self.max_tries or time.monotonic() - self.t0 > self.seconds:
            result.stopped = "tries" if result.tried >= self.max_tries else "time"
            result.limit = f"{self.max_tries} tries" if result.stopped == "tries" else f"{self.seconds:g} s"
            raise _Spent
        self.done.add(sig)
        try:
            error = _probe(self.run, binding)
        except TooBig:
            self.capped[key] = min(size, self.capped.get(key, MAX_SIZE + 1))
            return False
        result.tried += 1
        if error is None:
            result.found = binding
            return True
        result.rejected.add(sig)
        self.learn(error)
        return False

    def refill(self) -> bool:
        """With no move queued: the next growing size, until every dim (and all
        together) is capped; then the echoes. False when no candidate is left."""
        keys, capped = self.keys, self.capped
        while self.power in self.queued and self.power <= MAX_SIZE:
            self.power *= 2
        groups = (*keys, None) if len(keys) > 1 else tuple(keys)
        if self.power <= MAX_SIZE and any(self.power < capped.get(k, MAX_SIZE + 1) for k in groups):
            self.queued.add(self.power)
            self.moves.append((self.power, None))
        elif self.echoes:
            self.moves.append((self.echoes.popleft(), None))
        else:
            return False
        return True

    def step(self) -> bool:
        """Tries the next move; True when a binding is found."""
        size, key = self.moves.popleft()
        if key is not None:
            return self.attempt(key, size)
        keys = self.keys
        return any(self.attempt(k, size) for k in keys) or (len(keys) > 1 and self.attempt(None, size))

    def until_found(self) -> SearchResult:
        try:
            while (self.moves or self.refill()) and not self.step():
                pass
        except _Spent:
            pass
        self.result.seconds = time.monotonic() - self.t0
        return self.result


def search(keys: Sequence[str], base: Mapping[str, int], run: Run, *, errors: Sequence[str] = (),
           hints: Optional[Mapping[str, Sequence[int]]] = None, constants: Sequence[int] = (),
           tried: Iterable[Mapping[str, int]] = (), max_tries: Optional[int] = None,
           seconds: Optional[float] = None) -> SearchResult:
    """The first binding of ``keys`` (the others as in ``base``) that ``run`` accepts:
    ``run(binding)`` is None when the original runs it, else its error text, and raises
    TooBig for a binding whose inputs are not made (not counted as a try). ``errors``
    are the synthesized bindings' errors, ``tried`` those bindings (not run again)."""
    s = _Search(keys, base, run, tried, MAX_TRIES if max_tries is None else max_tries,
                MAX_SECONDS if seconds is None else seconds)
    for text in errors:
        s.learn(text)
    for key in keys:
        s.moves.extend((size, key) for size in (hints or {}).get(key, ()))
    s.moves.extend((size, None) for size in constants if size not in s.queued)
    s.queued.update(constants)
    return s.until_found()
