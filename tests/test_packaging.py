"""What users install is a wheel, not this checkout: build it, install it into a fresh
virtual environment with its runtime dependencies only, and run the tool from a folder
away from the source tree."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top-level modules that only the optional extras bring; a legalizer module that needs
# one of them may fail to import in a runtime-only install, and only with that name.
EXTRA_MODULES = {"onnx_ir", "jax", "jaxlib", "torch", "onnxscript", "iree", "ai_edge_litert", "ray"}


def _package_dirs() -> set[str]:
    """Every package of the source tree, as the wheel must ship it."""
    return {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "legalizer").rglob("__init__.py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    # Built from a copy, so the build leaves nothing (build/, *.egg-info) in the checkout.
    src = tmp_path_factory.mktemp("src") / "legalize"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".cache", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                   check=True, capture_output=True)
    (found,) = dist.glob("legalizer-*.whl")
    return found


def test_wheel_ships_every_package_and_the_rules(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "legalizer/rules/onnx.toml" in names
    assert "legalizer/report.schema.json" in names  # the report's definition (legalize --schema)
    shipped = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.startswith("legalizer/")}
    assert _package_dirs() <= shipped, sorted(_package_dirs() - shipped)


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    # The wheel's own runtime dependencies, resolved by pip as a user's install is.
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return venv


def _clean_env() -> dict:
    """No PYTHONPATH, no source tree: only what the venv holds is importable (and no
    LEGALIZE_VALIDATE_REPORTS: the tests' schema check needs the test extra's jsonschema,
    which a user's install does not have)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "LEGALIZE_"))}
    env["PATH"] = "/usr/bin:/bin"
    return env


def test_installed_wheel_runs_the_main_job(fresh_venv, tmp_path):
    work = tmp_path / "away"
    work.mkdir()
    model = work / "mlp_bias.onnx"
    shutil.copy(ROOT / "models" / "mlp_bias.onnx", model)
    env = _clean_env()
    exe = fresh_venv / "bin" / "legalize"

    where = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", "import legalizer; print(legalizer.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(fresh_venv)), where.stdout

    helped = subprocess.run([str(exe), "--help"], cwd=work, env=env, capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    assert "--target" in helped.stdout

    ran = subprocess.run([str(exe), str(model), "--json", "--provider", "cpu"], cwd=work, env=env,
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["check"]["ran"] and report["check"]["ok"]
    assert report["stats"]["reshapes_inserted"] + report["stats"]["constants_folded"] > 0
    assert (work / "mlp_bias.legal.onnx").is_file()


def test_installed_wheel_imports_every_module(fresh_venv, tmp_path):
    probe = r"""
import importlib, json, pkgutil, legalizer
results = {"legalizer": None}
for info in pkgutil.walk_packages(legalizer.__path__, "legalizer."):
    try:
        importlib.import_module(info.name)
        results[info.name] = None
    except ModuleNotFoundError as e:
        results[info.name] = e.name
print(json.dumps(results))
"""
    out = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=_clean_env(),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    modules = {str(p.relative_to(ROOT).with_suffix("")).replace("/", ".").removesuffix(".__init__")
               for p in (ROOT / "legalizer").rglob("*.py")}
    assert modules <= set(results), sorted(modules - set(results))
    missing = {name: dep for name, dep in results.items() if dep is not None}
    assert all(dep.split(".")[0] in EXTRA_MODULES for dep in missing.values()), missing
    # The core path never needs an extra.
    for core in ("legalizer.cli", "legalizer.api", "legalizer.pipeline", "legalizer.passes", "legalizer.numeric.ort"):
        assert results.get(core, "absent") is None, (core, results.get(core))
