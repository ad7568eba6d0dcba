"""The package's structure (docs/architecture.md): imports point down the layers
that pyproject.toml's import-linter contract lists, no module takes part in an import
cycle (imports inside functions count), and no module is over 1,000 lines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 1000


def import_cycles(package: str) -> list:
    """Every set of modules of ``package`` that import one another in a circle, each
    sorted, as grimp reads the imports (module level and inside functions)."""
    graph = grimp.build_graph(package, cache_dir=None)
    g = nx.DiGraph()
    for m in graph.modules:
        g.add_node(m)
        g.add_edges_from((m, d) for d in graph.find_modules_directly_imported_by(m))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_the_package_has_no_import_cycle():
    assert import_cycles("legalizer") == []


def test_imports_point_down_the_layers():
    p = _lint_imports(ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "imports point down KEPT" in p.stdout


def test_the_siblings_of_every_layer_are_independent():
    """No contract lets two modules of one layer import each other (import-linter's
    ':'), and exporters share a layer with importers: neither imports the other."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert {c["containers"][0] for c in contracts} >= {"legalizer", "legalizer.numeric", "legalizer.passes",
                                                        "legalizer.verifier"}
    assert [layer for c in contracts for layer in c["layers"] if ":" in layer] == []
    assert any({"importers", "exporters"} <= {m.strip() for m in layer.split("|")} for layer in contracts[0]["layers"])


def test_a_sibling_import_breaks_the_contract(tmp_path):
    _package(tmp_path, {"__init__.py": "", "left.py": "", "right.py": "def f():\n    from . import left\n"})
    p = _lint_toy_layers(tmp_path, '"left | right"')
    assert p.returncode == 1
    assert "imports point down BROKEN" in p.stdout and "toypkg.right -> toypkg.left" in p.stdout


def _lint_toy_layers(tmp_path: Path, layers: str):
    """lint-imports over the toy package under one layers contract (``layers``: TOML)."""
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [tool.importlinter]
        root_package = "toypkg"
        [[tool.importlinter.contracts]]
        name = "imports point down"
        type = "layers"
        containers = ["toypkg"]
        layers = [{layers}]
        """))
    return _lint_imports(tmp_path)


def _package(tmp_path: Path, files: dict) -> None:
    for name, text in files.items():
        path = tmp_path / "toypkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_cycle_through_a_function_level_import_is_found(tmp_path, monkeypatch):
    _package(tmp_path, {"__init__.py": "", "low.py": "def f():\n    from . import high\n",
                        "high.py": "from . import low\n", "other.py": "from . import low\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("toypkg") == [["toypkg.high", "toypkg.low"]]


def test_an_upward_import_breaks_the_contract(tmp_path):
    _package(tmp_path, {"__init__.py": "", "top.py": "", "bottom.py": "def f():\n    from . import top\n"})
    p = _lint_toy_layers(tmp_path, '"top", "bottom"')
    assert p.returncode == 1
    assert "imports point down BROKEN" in p.stdout and "toypkg.bottom -> toypkg.top" in p.stdout


def test_no_module_is_over_1000_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in (ROOT / "legalizer").rglob("*.py")
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert long == {}


def _documented_layers() -> list:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("# Architecture\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. (.*?)(?=^\d+\. |^\S|\Z)", section, re.M | re.S)
    return [re.findall(r"`([\w.]+)`", item.split(":", 1)[0]) for item in items]


def _unlayered_modules(listed: set) -> list:
    """The modules of the package in no layer (neither they nor a package above them
    listed), but for a package's ``__init__`` that holds a docstring alone: a package
    whose modules sit in several layers (a model kind's, ``kinds/<kind>/``) imports
    nothing itself."""
    out = []
    for p in sorted((ROOT / "legalizer").rglob("*.py")):
        parts = p.relative_to(ROOT / "legalizer").with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not name or any(".".join(name.split(".")[:i]) in listed for i in range(1, name.count(".") + 2)):
            continue
        body = ast.parse(p.read_text(encoding="utf-8")).body
        if parts[-1] == "__init__" and len(body) == 1 and isinstance(body[0], ast.Expr):
            continue
        out.append(name)
    return out


def test_the_architecture_page_lists_the_contract_layers_and_every_module():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    layers = [[m.strip() for m in re.split(r"[:|]", layer)] for layer in contract["layers"]]
    assert _documented_layers() == layers
    listed = {m for layer in layers for m in layer}
    assert _unlayered_modules(listed) == []
    where = ROOT / "legalizer"
    assert sorted(m for m in listed if not (where / m.replace(".", "/")).with_suffix(".py").exists()
                  and not (where / m.replace(".", "/") / "__init__.py").exists()) == []


def test_a_module_in_no_layer_is_found(tmp_path, monkeypatch):
    """(The check above, on a module of a split package that no layer lists.)"""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for name, text in {"__init__.py": "", "kinds/__init__.py": '"""doc"""\n', "kinds/a.py": "", "kinds/b.py": "",
                       "low.py": ""}.items():
        (tmp_path / "legalizer" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "legalizer" / name).write_text(text)
    assert _unlayered_modules({"low", "kinds.a"}) == ["kinds.b"]
