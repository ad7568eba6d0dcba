"""Golden data: the inputs a check feeds and the outputs it compares, kept in files and
read back (``--save-inputs``, ``--save-outputs``, ``--load-inputs``, ``--load-outputs``),
and the feeds a user's data loader script yields (``--data-loader-script``).

Two file formats, by the path's suffix: ``.npz`` (numpy's archive) and anything else
Polygraphy's JSON (``polygraphy_json``: what ``polygraphy run --save-inputs`` and
``--save-outputs`` write and ``--load-inputs`` / ``--load-outputs`` read).

A ``Samples`` is a list of feed dicts, one per sample (Polygraphy's iterations). An
``.npz`` of one sample holds its arrays by name (as ``--input FILE.npz`` reads it); one
of several samples names each array ``<sample>/<name>`` (``0/x``, ``1/x``, ...).

Loaded files are untrusted: the file's size is bounded before it is read, and each
array's size is known from its header (a zip member's declared size, a ``.npy``
header) before it is inflated. What is written is written whole or not at all
(``atomic_files.atomic_output``).
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import UsageError, first_line
from ..atomic_files import atomic_output
from . import polygraphy_json
from .inputs import MAX_INPUT_BYTES
from .polygraphy_json import FormatError, Runs

Feed = Dict[str, np.ndarray]
Samples = List[Feed]

# A golden file is read whole: one larger than this is refused before it is read (an
# array in JSON takes 4/3 of its bytes, and several samples may be kept).
MAX_FILE_BYTES = 4 * MAX_INPUT_BYTES
MAX_SAMPLES = 10_000
_SAMPLE_KEY = re.compile(r"(\d+)/(.+)", re.S)


def is_npz(path: Path) -> bool:
    return Path(path).suffix.lower() == ".npz"


def _size_checked(path: Path, flag: str) -> int:
    try:
        st = os.stat(path)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it: {e.strerror}") from None
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: not a file")
    if st.st_size > MAX_FILE_BYTES:
        raise UsageError(f"{flag} {path}: {st.st_size / 2**30:.3g} GiB, more than a golden file may be"
                         f" ({MAX_FILE_BYTES / 2**30:.3g} GiB)")
    return st.st_size


def _read_text(path: Path, flag: str) -> str:
    _size_checked(path, flag)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head.startswith(b"PK\x03\x04") or head.startswith(b"\x93NUM"):
                raise UsageError(f"{flag} {path}: a numpy file, not JSON: name it .npz")
            return (head + f.read()).decode("utf-8")
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {path}: not JSON (not UTF-8 text)") from None


def read_npz_checked(path: Path, flag: str, max_bytes: int = MAX_INPUT_BYTES) -> Dict[str, np.ndarray]:
    """Every array of an ``.npz``, each member's inflated size (the zip's own record)
    and ``.npy`` header checked before it is inflated."""
    _size_checked(path, flag)
    arrays: Dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            total = sum(i.file_size for i in infos)
            if total > MAX_FILE_BYTES:
                raise UsageError(f"{flag} {path}: inflates to {total / 2**30:.3g} GiB, more than a golden file"
                                 f" may ({MAX_FILE_BYTES / 2**30:.3g} GiB)")
            _sample_count([i.filename[:-4] if i.filename.endswith(".npy") else i.filename for i in infos],
                          path, flag)
            for info in infos:
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if info.file_size > max_bytes + 4096:
                    raise UsageError(f"{flag} {path}: array '{name}' inflates to {info.file_size / 2**30:.3g} GiB,"
                                     f" more than the check takes ({max_bytes / 2**30:.3g} GiB)")
                with z.open(info) as f:
                    data = f.read(info.file_size + 1)
                polygraphy_json.npy_header(data, f"array '{name}'", max_bytes)
                arrays[name] = np.load(io.BytesIO(data), allow_pickle=False)
    except FormatError as e:
        raise UsageError(f"{flag} {path}: {e}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise UsageError(f"{flag} {path}: cannot read it as an .npz archive: {first_line(e)}") from None
    if not arrays:
        raise UsageError(f"{flag} {path}: the archive holds no arrays")
    return arrays


def _sample_count(names: Sequence[str], path: Path, flag: str) -> int:
    """How many samples an ``.npz`` of these member names holds (``_split_samples``),
    refused past ``MAX_SAMPLES`` from the names alone, before any member is read."""
    keys = [_SAMPLE_KEY.fullmatch(n) for n in names]
    if not keys or not all(keys):
        return 1
    top = max(keys, key=lambda m: int(m.group(1)))
    if int(top.group(1)) >= MAX_SAMPLES:
        raise UsageError(f"{flag} {path}: array '{top.group(0)}' is sample {int(top.group(1))}, more than a check"
                         f" runs ({MAX_SAMPLES} samples)")
    return int(top.group(1)) + 1


def _split_samples(arrays: Mapping[str, np.ndarray]) -> Samples:
    """An ``.npz``'s arrays as samples: ``<k>/<name>`` keys (every one) are samples
    0..n-1; plain names are one sample."""
    keys = {key: _SAMPLE_KEY.fullmatch(key) for key in arrays}
    if not all(keys.values()):
        return [dict(arrays)]
    count = max(int(m.group(1)) for m in keys.values()) + 1
    samples: Samples = [{} for _ in range(count)]
    for key, m in keys.items():
        samples[int(m.group(1))][m.group(2)] = arrays[key]
    return samples


def _join_samples(samples: Sequence[Mapping[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    if len(samples) == 1:
        return dict(samples[0])
    return {f"{k}/{name}": a for k, feed in enumerate(samples) for name, a in feed.items()}


def _files(path: Path, flag: str) -> List[Path]:
    """A file, or a folder of per-iteration ``*.json`` files in name order (as
    ``polygraphy run --save-inputs DIR`` writes a path without a suffix)."""
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.glob("*.json") if p.is_file())
    if not files:
        raise UsageError(f"{flag} {path}: a folder with no .json file in it")
    if len(files) > MAX_SAMPLES:
        raise UsageError(f"{flag} {path}: {len(files)} files, more than a check runs ({MAX_SAMPLES} samples)")
    return files


def read_inputs(path: Path, flag: str = "--load-inputs") -> Samples:
    """The samples a file holds: Polygraphy's input data (JSON: a file, or a folder of
    one file per iteration) or an ``.npz``."""
    path = Path(path)
    if is_npz(path):
        samples = _split_samples(read_npz_checked(path, flag))
    else:
        samples = []
        for f in _files(path, flag):
            try:
                samples += polygraphy_json.load_inputs(_read_text(f, flag), MAX_INPUT_BYTES, MAX_SAMPLES)
            except FormatError as e:
                raise UsageError(f"{flag} {f}: {e}") from None
            _bounded(samples, path, flag)
    return _bounded(samples, path, flag)


def read_outputs(path: Path, flag: str = "--load-outputs") -> Tuple[str, Samples, List[str]]:
    """The reference outputs a file holds, per sample: (the runner's name, the samples,
    the names of the other runners, which are not used). Polygraphy's run results keep
    several runners; the first is the reference, as ``polygraphy run --load-outputs``
    compares every runner against it."""
    path = Path(path)
    if is_npz(path):
        return "", _bounded(_split_samples(read_npz_checked(path, flag)), path, flag), []
    runs: Runs = []
    for f in _files(path, flag):
        try:
            more = polygraphy_json.load_runs(_read_text(f, flag), MAX_INPUT_BYTES)
        except FormatError as e:
            raise UsageError(f"{flag} {f}: {e}") from None
        if runs and [n for n, _ in more] != [n for n, _ in runs]:
            raise UsageError(f"{flag} {f}: its runners ({', '.join(n for n, _ in more)}) are not the first"
                             f" file's ({', '.join(n for n, _ in runs)})")
        runs = more if not runs else [(n, its + new) for (n, its), (_, new) in zip(runs, more)]
        _bounded(runs[0][1], path, flag)
    name, samples = runs[0]
    return name, _bounded(samples, path, flag), [n for n, _ in runs[1:]]


def _bounded(samples: Samples, path: Path, flag: str) -> Samples:
    if not samples or not any(samples):
        raise UsageError(f"{flag} {path}: holds no sample")
    if len(samples) > MAX_SAMPLES:
        raise UsageError(f"{flag} {path}: {len(samples)} samples, more than a check runs ({MAX_SAMPLES})")
    return samples


def write_inputs(path: Path, samples: Sequence[Mapping[str, np.ndarray]], *, force: bool,
                protect: Optional[Path] = None) -> None:
    _write(path, samples, None if is_npz(path) else polygraphy_json.dump_inputs, force=force, protect=protect)


def write_outputs(path: Path, runs: Runs, *, force: bool, protect: Optional[Path] = None) -> None:
    """``runs``: (runner name, per sample its outputs). An ``.npz`` keeps the first
    runner's (the reference's) only; Polygraphy's JSON keeps every runner."""
    if is_npz(path):
        _write(path, runs[0][1], None, force=force, protect=protect)
    else:
        _write(path, runs, polygraphy_json.dump_runs, force=force, protect=protect)


def _write(path: Path, data, dump: Optional[Callable], *, force: bool, protect: Optional[Path]) -> None:
    with atomic_output(Path(path), force=force, protect=protect) as tmp:
        if dump is None:
            with open(tmp, "wb") as f:
                np.savez(f, **_join_samples(data))
        else:
            Path(tmp).write_text(dump(data), encoding="utf-8")


# -- a user's data loader -----------------------------------------------------------

def parse_script(spec: str) -> Tuple[Path, str]:
    """``FILE.py:FUNC`` (FUNC default ``load_data``, as Polygraphy's) -> (path, name)."""
    file, sep, func = spec.rpartition(":")
    if not sep or not func.isidentifier():
        file, func = spec, "load_data"
    if not file:
        raise UsageError(f"--data-loader-script expects FILE.py[:FUNC], not '{spec}'")
    return Path(file), func


def run_data_loader(spec: str) -> Samples:
    """Import the user's script and collect what its function yields: feed dicts. This
    runs the user's code, which is why it happens only when the option names it."""
    import importlib.util

    path, func = parse_script(spec)
    if not path.is_file():
        raise UsageError(f"--data-loader-script {path}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"legalize_data_loader_{abs(hash(str(path)))}", path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--data-loader-script {path}: not a Python script")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
        loader = getattr(module, func, None)
        if callable(loader):
            loader = loader()
        elif loader is None or not hasattr(loader, "__iter__") or isinstance(loader, (str, bytes, Mapping)):
            raise UsageError(f"--data-loader-script {path}: defines no function (nor iterable) '{func}'")
        samples = []
        for k, feed in enumerate(loader):
            if k >= MAX_SAMPLES:
                raise UsageError(f"--data-loader-script {spec}: yields more than {MAX_SAMPLES} samples")
            if not isinstance(feed, Mapping) or not all(isinstance(n, str) for n in feed):
                raise UsageError(f"--data-loader-script {spec}: sample {k} is a {type(feed).__name__}, not a dict"
                                 " of input names to arrays")
            samples.append({n: np.asarray(a) for n, a in feed.items()})
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: its words, on one line
        raise UsageError(f"--data-loader-script {spec}: the script failed: {type(e).__name__}: {first_line(e)}") \
            from None
    if not samples:
        raise UsageError(f"--data-loader-script {spec}: yields no sample")
    return samples


# -- one run's golden data ----------------------------------------------------------

REFERENCE_RUN, CANDIDATE_RUN = "original-onnxrt", "legalized-onnxrt"


class Golden:
    """What a run feeds and compares with, from the options that name files and
    scripts: ``samples`` (None: the check makes its own inputs), ``expected`` (None:
    the original is run) and the name of the stored reference run."""

    def __init__(self, samples: Optional[Samples] = None, expected: Optional[Samples] = None,
                 reference: str = "", notes: Sequence[str] = (), runner: str = ""):
        self.samples, self.expected, self.reference = samples, expected, reference
        self.notes, self.runner = list(notes), runner

    def failing_feeds(self, result) -> Optional[Feed]:
        """The stored sample a localization should feed: the first that failed."""
        if self.samples is None or result is None:
            return None
        for b in result.bindings:
            if b.sample is not None and not b.skipped and not b.ok:
                return self.samples[b.sample]
        return None

    @classmethod
    def read(cls, load_inputs: Optional[Path], load_outputs: Optional[Path],
             data_loader_script: Optional[str]) -> "Golden":
        """Read the files (and run the script) the options name; UsageError for a
        combination that makes no sense or a file that cannot be read."""
        if load_inputs is not None and data_loader_script is not None:
            raise UsageError("--load-inputs and --data-loader-script both give the inputs: give one")
        if load_outputs is not None and load_inputs is None and data_loader_script is None:
            raise UsageError("--load-outputs compares with outputs computed from stored inputs: give them with"
                             " --load-inputs (or --data-loader-script)")
        samples = load_inputs_of(load_inputs, data_loader_script)
        if load_outputs is None:
            return cls(samples)
        name, expected, others = read_outputs(Path(load_outputs))
        notes = [f"--load-outputs: the runs of {', '.join(others)} are not used (the first, {name}, is the"
                 " reference)"] if others else []
        return cls(samples, expected, f"{Path(load_outputs).name}" + (f" ({name})" if name else ""), notes,
                   runner=name)


def load_inputs_of(path: Optional[Path], script: Optional[str]) -> Optional[Samples]:
    if path is not None:
        return read_inputs(Path(path))
    if script is not None:
        return run_data_loader(script)
    return None


def save_runs(runs: Sequence[tuple], reference: str, save_inputs: Optional[Path], save_outputs: Optional[Path],
              *, force: bool, protect: Optional[Path] = None, candidate: str = CANDIDATE_RUN) -> Dict[str, str]:
    """Write what a check fed (``save_inputs``) and got (``save_outputs``: the
    reference's run, then the legalized model's when it ran on every sample); ``runs``
    is ``CheckResult.runs``. The paths written, by what they hold."""
    written: Dict[str, str] = {}
    if not runs:
        return written
    if save_inputs is not None:
        write_inputs(Path(save_inputs), [feeds for feeds, _, _ in runs], force=force, protect=protect)
        written["inputs"] = str(save_inputs)
    if save_outputs is not None:
        out: Runs = [(reference or REFERENCE_RUN, [dict(expected) for _, expected, _ in runs])]
        if all(got is not None for _, _, got in runs):
            out.append((candidate, [dict(got) for _, _, got in runs]))
        write_outputs(Path(save_outputs), out, force=force, protect=protect)
        written["outputs"] = str(save_outputs)
    return written
