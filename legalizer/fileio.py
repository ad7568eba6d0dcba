"""Reading model files (recognized by content) and writing them atomically."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from .errors import BadInput, UsageError
from .protoutil import is_repeated
from .model import Model

FORMATS = ("onnx", "tflite", "mlir", "mlirbc", "pt2")


# Formats recognized by content that this version does not read: what to tell the user.
NOT_SUPPORTED = {
    "torch": "a PyTorch checkpoint (torch.save), which holds weights, not a graph;"
             " export the model with torch.onnx.export and pass the .onnx file",
    "zip": "a zip archive, not a model file",
    "npy": "a NumPy array file, not a model file",
    "hdf5": "an HDF5 file (a Keras .h5 model?), which legalize does not read;"
            " convert the model to ONNX or TFLite first",
}


def _zip_kind(path: Path) -> str:
    """A zip is a torch.export archive, a torch.save checkpoint, or something else."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return "zip"
    leaves = {n.rstrip("/").rsplit("/", 1)[-1] for n in names}
    if leaves & {"archive_format", "serialized_exported_program.json"}:
        return "pt2"
    if "data.pkl" in leaves:
        return "torch"
    return "zip"


def _meant_as_tflite(path: Path, head: bytes) -> bool:
    """A TFLite file whose identifier (bytes 4..8) is not TFL3: named .tflite, or a
    flatbuffer header (a 4-aligned root offset inside the file, then four printable
    identifier bytes). The TFLite importer then names the identifier it found, instead of
    the ONNX parser failing on it. Binary ONNX opens with 0x08 (ir_version's tag), a
    byte TFLite writers never start with (the root offset is past the header and the
    root table's vtable: 0x10 to 0x30), so ONNX is never taken for TFLite; nor is text."""
    if head[:1] == b"\x08" or _looks_like_text(head):
        return False
    if path.suffix.lower() == ".tflite":
        return True
    if len(head) < 8:
        return False
    root = int.from_bytes(head[:4], "little")
    return root % 4 == 0 and 8 < root < path.stat().st_size and all(0x20 < b < 0x7F for b in head[4:8])


def sniff(path: Path) -> str:
    """The model format of ``path``, from its content; BadInput if it is none."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        if (path / "saved_model.pb").exists():
            raise BadInput(f"{path}: is a TensorFlow SavedModel, which legalize does not read;"
                           " convert it to TFLite or ONNX first")
        raise BadInput(f"{path}: is a directory, not a model file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise BadInput(f"{path}: is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not head:
        raise BadInput(f"{path}: is empty")
    if head[4:8] == b"TFL3":
        return "tflite"
    if head.startswith(b"ML\xefR"):
        return "mlirbc"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(path)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    if _meant_as_tflite(path, head):  # after the magic numbers: a zip named .tflite is a zip
        return "tflite"
    text = head.lstrip()
    # MLIR text opens with an op (custom or generic form), an attribute or type alias
    # (#loc, #map, !t = ...), a comment, or file metadata; a .mlir of text is taken too.
    # A binary ONNX file opens with a protobuf tag (0x08 for ir_version), never text.
    if text.startswith((b"module", b"func.func", b"#", b"!", b"//", b"\"", b"{-#")) or (
            path.suffix == ".mlir" and _looks_like_text(head)):
        return "mlir"
    return "onnx"


def _looks_like_text(head: bytes) -> bool:
    import codecs

    try:  # not final: ``head`` may end inside a character
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in text)


def load_onnx_proto(path: Path) -> onnx.ModelProto:
    size = path.stat().st_size
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        with open(path, "rb") as f:
            head = f.read(256)
        if _looks_like_text(head[:200]):
            raise BadInput(f"{path}: is a text file, not an ONNX model") from None
        raise BadInput(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'protobuf decode failed'})") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not model.HasField("graph") or model.ir_version <= 0:
        raise BadInput(f"{path}: not an ONNX model ({size} bytes that parse as no ModelProto"
                       " with a graph and an IR version)")
    # Its strings are checked for UTF-8 by the importer (importers.onnx._check_strings).
    return model


def invalid_string_field(msg: Message, where: str = "") -> Optional[str]:
    """The path of the first string field that is not valid UTF-8, else None.

    ONNX is proto2, so the parser accepts any bytes in a string field and the Python
    API then hands back ``bytes`` instead of ``str`` (names, op types, domains), which
    would break everything downstream. This walk is slow (a third of the import of a
    100,000-node model): the importer runs it only once a C-level check
    (``protoutil.strings_are_utf8``) has found a bad string, to name its field;
    tensor payloads are bytes fields and are not looked at."""
    for f, v in msg.ListFields():
        if f.type == FieldDescriptor.TYPE_STRING:
            if any(type(s) is bytes for s in (v if is_repeated(f) else (v,))):
                return where + f.name
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            for i, sub in enumerate(v if is_repeated(f) else (v,)):
                bad = invalid_string_field(sub, f"{where}{f.name}[{i}]." if is_repeated(f) else f"{where}{f.name}.")
                if bad is not None:
                    return bad
    return None


def check_external_data(path: Path) -> None:
    """For an ONNX file that is handed to onnxruntime as a path (which then reads its
    external data): BadInput, naming the file, for external data that
    ``ir.constdata.external_data`` refuses. Other formats are left alone."""
    if sniff(path) != "onnx":
        return
    from .ir.constdata import check_external

    proto = load_onnx_proto(path)
    try:
        check_external(proto, path.resolve().parent)
    except BadInput as e:
        raise BadInput(f"{path}: {e}") from None


def load(path, infer: bool = True, trust_pt2: bool = False) -> Model:
    """Load a model file of any supported format into the IR (a ``.pt2`` through its
    ONNX export: ``importers.pytorch``, the optional torch extra; read so that nothing
    in it runs unless ``trust_pt2``)."""
    path = Path(path)
    fmt = sniff(path)
    if fmt == "onnx":
        from .importers.onnx import import_model

        proto = load_onnx_proto(path)
        try:
            model = import_model(proto, path.resolve().parent, infer=infer)
        except BadInput as e:  # the importer knows the graph, not the file: name it
            raise BadInput(f"{path}: {e}") from None
        model.source = path
        return model
    if fmt == "tflite":
        from .importers.tflite import load_tflite

        return load_tflite(path)
    if fmt in ("mlir", "mlirbc"):
        from .importers.mlir import load_mlir

        return load_mlir(path)
    if fmt == "pt2":  # the optional torch extra: exported to ONNX by torch.onnx.export
        from .importers.pytorch import load_pt2

        return load_pt2(path, infer=infer, trust=trust_pt2)
    raise BadInput(f"{path}: is {NOT_SUPPORTED[fmt]}")


@contextmanager
def atomic_output(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success give it the name ``path``
    (``commit``).

    An interrupted or failed write leaves nothing behind. ``protect`` (the input) is
    never overwritten; an existing ``path`` needs ``force``, and is then replaced only
    if it is a regular file.
    """
    path = Path(path)
    check_output_path(path, force=force, protect=protect)
    temps: List[Path] = []
    try:
        tmp = temp_beside(path, temps)
        yield tmp
        commit(tmp, path, force=force)
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None
    finally:
        remove_temps(temps)


def temp_beside(path: Path, temps: List[Path]) -> Path:
    """A new, empty, hidden temporary file beside ``path`` (``.<name>.<random>.tmp``),
    with the permissions ``path`` has or would get. Its name is added to ``temps``
    before the file is made, so that a run interrupted at any point (SIGTERM, ^C) finds
    it there to remove (``remove_temps``)."""
    path = Path(path)
    mode = _file_mode(path)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        temps.append(tmp)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another's: not ours to remove
            temps.pop()
            continue
        except OSError as e:
            temps.pop()
            raise UsageError(f"{path}: cannot write: {e.strerror}") from None
        try:
            os.fchmod(fd, mode)  # made private, then given the usual permissions
        finally:
            os.close(fd)
        return tmp
    raise UsageError(f"{path}: cannot write: no free temporary name beside it")


def remove_temps(temps: List[Path]) -> None:
    for tmp in temps:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


# os.link fails with these where the file system has no hard links (FAT, some FUSE
# and network mounts): the name is then claimed with O_EXCL instead.
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def commit(tmp: Path, path: Path, *, force: bool) -> None:
    """Give the finished file ``tmp`` the name ``path``: the one step that makes an
    output visible, whole. Without ``force`` it never replaces anything: a hard link,
    which fails if the name is taken, so that of two runs writing one output the second
    fails (exit 2) instead of silently replacing the first one's result. With ``force``
    only a regular file is replaced (never a device, a FIFO or a socket)."""
    if not force:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UsageError(f"{path}: already exists (use --force to replace it)") from None
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                raise UsageError(f"{path}: already exists (use --force to replace it)") from None
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
        return
    _refuse_special(path)
    os.replace(tmp, path)


def _refuse_special(path: Path) -> None:
    """UsageError if ``path`` (or what a symbolic link there leads to) exists and is not
    a regular file: renaming over it would turn a device, a FIFO or a socket into a file."""
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there (or a dangling link, which is replaced)
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: is not a regular file (a device, a FIFO or a socket);"
                         " legalize replaces only regular files")


def _file_mode(path: Path) -> int:
    """The permissions of the file we replace, else those of a new file (umask)."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return st.st_mode & 0o777
    except OSError:
        pass
    umask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(umask)
    return 0o666 & ~umask


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once links and ``..`` are
    resolved, or two names (hard links) of one existing file."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_distinct(outputs: Sequence[Tuple[str, Path]], inputs: Sequence[Path] = ()) -> None:
    """UsageError if one of ``outputs`` ((what it is, its path) pairs: "the report
    (--report)", ...) is one of ``inputs`` or another output: every file a run writes is
    its own, and no input is written. A path is one file with another when both resolve
    to one path (links, ``..``) or are two names (hard links) of one existing file. Call
    it before the work."""
    seen: Dict[object, Optional[str]] = {}

    def keys(p: Path) -> List[object]:
        found: List[object] = [os.path.realpath(p)]
        try:
            st = os.stat(p)
            found.append((st.st_dev, st.st_ino))
        except OSError:
            pass
        return found

    for model in inputs:
        for k in keys(Path(model)):
            seen[k] = None
    for what, p in outputs:
        if p is None:
            continue
        ks = keys(Path(p))
        for k in ks:
            if k in seen:
                if seen[k] is None:
                    raise UsageError(f"{p}: is an input model and {what}; refusing to overwrite it")
                raise UsageError(f"{p}: is both {seen[k]} and {what}; give each its own path")
        for k in ks:
            seen[k] = what


def check_output_path(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> None:
    """UsageError unless ``path`` can be written by ``atomic_output``. Call it before
    the work, so that a bad output path fails at once and with nothing written."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory")
    if protect is not None and path.exists() and Path(protect).exists() and os.path.samefile(path, protect):
        raise UsageError(f"{path}: refusing to overwrite the input model")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{path}: already exists (use --force to replace it)")
    _refuse_special(path)
    if not path.parent.exists():
        raise UsageError(f"{path.parent}: output directory does not exist")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent}: is not a directory")
    temps: List[Path] = []
    try:  # the one sure test that a file can be made there (permissions, a read-only mount, /proc)
        temp_beside(path, temps)
    finally:
        remove_temps(temps)
