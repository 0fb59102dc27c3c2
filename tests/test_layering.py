"""The package layering of DESIGN §1: no JAX where it must not be, no service importing another,
no test code in what ships.

Importing every module of a no-JAX package in a fresh interpreter leaves `jax` out of sys.modules
(catches transitive imports); a static scan of import statements finds no service package
importing another and no runtime package importing rlx_testing or pytest (catches imports inside
functions too); the fakes of cloud APIs live in rlx_testing alone, and no runtime package depends
on rlx-testing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
NO_JAX = [
    "rlx_core",
    "rlx_paramserver",
    "rlx_verifier",
    "rlx_data",
    "rlx_controller",
    "rlx_launch",
    "rlx_testing",
    "rlx_cli",
]
SERVICES = ["rlx_paramserver", "rlx_inference", "rlx_trainer", "rlx_verifier", "rlx_controller"]
SRC = {
    "rlx_cli": ROOT / "cli/src/rlx_cli",
    **{
        f"rlx_{p.name}": p / "src" / f"rlx_{p.name}"
        for p in (ROOT / "packages").iterdir()
        if (p / "src").is_dir()
    },
}

IMPORT_ALL = """
import importlib, pkgutil, sys
pkg = importlib.import_module({name!r})
for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
    importlib.import_module(info.name)
heavy = set(["jax", "jaxlib", "flax", "optax", "orbax"])
bad = sorted(set(m.split(".")[0] for m in sys.modules) & heavy)
print(",".join(bad))
"""


@pytest.mark.parametrize("name", NO_JAX)
def test_no_jax_package_never_imports_jax(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL.format(name=name)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{name} imports {result.stdout.strip()}"


def imported_modules(package_dir: Path) -> set[tuple[str, str]]:
    """(file, top-level module) for every import statement under package_dir."""
    found = set()
    for path in package_dir.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {(str(path), a.name.split(".")[0]) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(path), node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("name", SERVICES)
def test_service_imports_no_other_service(name: str) -> None:
    others = set(SERVICES) - {name}
    bad = sorted(f"{f}: {m}" for f, m in imported_modules(SRC[name]) if m in others)
    assert not bad, "services talk through rlx_core.clients, never by import:\n" + "\n".join(bad)


def test_core_imports_no_other_rlx_package() -> None:
    bad = sorted(
        f"{f}: {m}"
        for f, m in imported_modules(SRC["rlx_core"])
        if m.startswith("rlx_") and m != "rlx_core"
    )
    assert not bad, bad


def test_the_scan_sees_every_package() -> None:
    assert set(SRC) == {*NO_JAX, "rlx_model", "rlx_inference", "rlx_trainer"}
    assert all((d / "__init__.py").exists() for d in SRC.values())


# --- test code stays out of the runtime packages ------------------------------------------------
RUNTIME = sorted(set(SRC) - {"rlx_testing"})
TEST_ONLY = {"rlx_testing", "pytest", "_pytest", "moto", "gcp_storage_emulator"}


@pytest.mark.parametrize("name", RUNTIME)
def test_runtime_package_imports_no_test_code(name: str) -> None:
    bad = sorted(f"{f}: {m}" for f, m in imported_modules(SRC[name]) if m in TEST_ONLY)
    assert not bad, "fixtures and fakes live in rlx_testing, for tests only:\n" + "\n".join(bad)


def fakes_under(package_dir: Path) -> set[str]:
    """`fake_X.py` for every module named fake_*, and `X.py: class FakeY` for every class named
    Fake*, under package_dir."""
    found = set()
    for path in package_dir.rglob("*.py"):
        if path.name.startswith("fake_"):
            found.add(path.name)
        tree = ast.parse(path.read_text(), filename=str(path))
        found |= {
            f"{path.name}: class {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name.startswith("Fake")
        }
    return found


def test_test_doubles_live_in_rlx_testing_only() -> None:
    assert {"fake_tpu.py", "fake_compute.py", "fake_tpu.py: class FakeTpuApi"} <= fakes_under(
        SRC["rlx_testing"]
    )  # the scan finds them where they are
    bad = sorted(f"{name}: {fake}" for name in RUNTIME for fake in fakes_under(SRC[name]))
    assert not bad, "test doubles belong in rlx_testing:\n" + "\n".join(bad)


def test_no_runtime_package_depends_on_rlx_testing() -> None:
    for name in RUNTIME:
        pyproject = tomllib.loads((SRC[name].parents[1] / "pyproject.toml").read_text())
        deps = {Requirement(d).name for d in pyproject["project"].get("dependencies", [])}
        assert "rlx-testing" not in deps, f"{name} depends on rlx-testing (tests only)"
