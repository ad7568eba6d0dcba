"""The distribution's name and its extras, in one place: every message that tells a
user what to install names the extra through ``install_hint``.

The command is ``legalize`` and the import package ``legalizer``; the distribution is
``legalizer`` too, since PyPI's ``legalize`` is an unrelated project."""

DISTRIBUTION = "legalizer"


def install_hint(extra: str) -> str:
    """``pip install 'legalizer[EXTRA]'``, quoted for a shell."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def importable(*modules: str) -> bool:
    """Whether every module named (``iree.runtime``) can be imported: an extra's, installed
    or not, asked without importing it."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # (a dotted name whose parent is missing)
        return False
