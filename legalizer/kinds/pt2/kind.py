"""The ``torch.export`` program record: a zip archive that holds one."""

from __future__ import annotations

from pathlib import Path

from ..base import Kind


def zip_kind(path: Path) -> str:
    """A zip is a torch.export archive (``pt2``), a torch.save checkpoint (``torch``), or
    something else (``zip``)."""
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


KIND = Kind(
    name="pt2", title="a torch.export program", suffixes=(".pt2",),
    magic=lambda path, head: head.startswith(b"PK\x03\x04") and zip_kind(path) == "pt2",
    read="legalizer.kinds.pt2.read:read",
    # the library's Model of a .pt2 is its ONNX export, as for a module
    library_read="legalizer.kinds.pt2.onnx_export:load_pt2",
    pair_check="legalizer.kinds.pt2.format:check_pair",
    formats=(("pt2", "legalizer.kinds.pt2.format:AtenFormat"),),
    written=".pt2", native_only="a torch.export program (.pt2)", every_subgraph=True, runtimes=("torch", "onnxruntime"),
    # its run's overlays: the legalized model's alone, as ONNX's ids name them; the view does
    # not draw it (Model Explorer's .pt2 adapter unpickles)
    explorer_ids="legalizer.explorer_ids:onnx_file_ids")
