"""The package layering of DESIGN §1: no JAX where it must not be, no service importing another,
no test code in what ships.

Importing every module of a no-JAX package in a fresh interpreter leaves `jax` out of sys.modules
(catches transitive imports); a static scan of import statements finds no service package
importing another and no runtime package importing rlx_testing or pytest (catches imports inside
functions too); the fakes of cloud APIs live in rlx_testing alone, and no runtime package depends
on rlx-testing.

Each package's face is its `__init__`'s `__all__`: the CLI, tools and other packages import
rlx_controller and rlx_launch only through those names, no module imports another package's
`_private` name, and the controller imports no launch code. Each scan is also run on a small
tree that breaks its rule, so a scan that stopped seeing anything would fail.
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


# --- each package's face is what callers import -------------------------------------------------
# the CLI, tools and other packages import these through their __all__ only
FACED = ["rlx_controller", "rlx_launch"]
LAUNCH_MODULES = {f"rlx_controller.{m}" for m in ("providers", "tpu_services", "provision", "node")}


def face(init: Path) -> set[str]:
    """The names in `__all__` of a package's __init__.py, read without importing it."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
    raise AssertionError(f"{init}: no __all__")


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) for every absolute import in a file: `import a.b` is (n, "a.b", [])
    and `from a.b import c, d` is (n, "a.b", ["c", "d"]); imports inside functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def past_the_faces(files: dict[Path, str | None], faces: dict[str, set[str]]) -> list[str]:
    """Imports of a faced package's submodule, or of a name not in its face, for each file and
    the package it belongs to (None: a tool); a package's own modules import each other freely."""
    bad = []
    for path, own in files.items():
        for line, module, names in imports(path):
            top = module.split(".")[0]
            if top not in faces or top == own:
                continue
            where = f"{shown(path)}:{line}"
            if module != top:
                bad.append(f"{where}: {module}")
            else:
                bad += [f"{where}: {top}.{n}" for n in names if n not in faces[top]]
    return bad


def test_cli_tools_and_packages_import_only_the_faces() -> None:
    faces = {name: face(SRC[name] / "__init__.py") for name in FACED}
    bad = past_the_faces(runtime_files(), faces)
    assert not bad, (
        "import these from the package top, and add a name the CLI needs to its __all__:\n"
        + "\n".join(bad)
    )


def runtime_files() -> dict[Path, str | None]:
    """Every module of the packages (cli/src included) and tools, with its package (None: a
    tool)."""
    files: dict[Path, str | None] = {
        path: name for name, src in SRC.items() for path in sorted(src.rglob("*.py"))
    }
    return files | {path: None for path in sorted((ROOT / "tools").rglob("*.py"))}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(files: dict[Path, str | None]) -> list[str]:
    """Imports of another rlx package's `_private` module or name, for each file and the package
    it belongs to (None: a tool, every rlx package is another's)."""
    bad = []
    for path, own in files.items():
        for line, module, names in imports(path):
            parts = module.split(".")
            if not parts[0].startswith("rlx_") or parts[0] == own:
                continue
            hidden = [p for p in parts[1:] if private(p)] + [n for n in names if private(n)]
            if hidden:
                bad.append(f"{shown(path)}:{line}: {module} {', '.join(hidden)}")
    return bad


def test_no_module_imports_another_packages_private_name() -> None:
    bad = private_imports(runtime_files())
    assert not bad, "a name another package needs is public (no underscore):\n" + "\n".join(bad)


def launch_imports(package_dir: Path) -> list[str]:
    """Imports of rlx_launch, or of the controller's old provider modules, under package_dir."""
    bad = []
    for path in sorted(package_dir.rglob("*.py")):
        for line, module, names in imports(path):
            named = {module} | {f"{module}.{n}" for n in names}
            if module.split(".")[0] == "rlx_launch" or named & LAUNCH_MODULES:
                bad.append(f"{shown(path)}:{line}: {module}")
    return bad


def test_controller_imports_no_launch_code() -> None:
    bad = launch_imports(SRC["rlx_controller"])
    assert not bad, "the loop is handed its services (a ServiceSet), never launches:\n" + "\n".join(
        bad
    )


def test_launch_and_controller_are_no_jax_packages() -> None:
    assert {"rlx_controller", "rlx_launch"} <= set(NO_JAX)  # test_no_jax_package_never_imports_jax


BROKEN = {  # a file that breaks each rule, and the scan that must see it
    "past the face": "from rlx_controller.driver import Driver\nfrom rlx_launch import _x, y\n",
    "private name": "from rlx_core.rpc import _handlers\nimport rlx_model._impl\n",
    "launch code": "def f():\n    from rlx_launch.local import read_services\n"
    "from rlx_controller import provision\n",
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_scan_sees_a_broken_tree(tmp_path: Path, rule: str) -> None:
    (tmp_path / "cli").mkdir()
    bad_file = tmp_path / "cli/bad.py"
    bad_file.write_text(BROKEN[rule])
    (tmp_path / "cli/good.py").write_text("from rlx_controller import Driver\nimport os\n")
    if rule == "past the face":
        faces = {"rlx_controller": {"Driver"}, "rlx_launch": {"y"}}
        found = past_the_faces({bad_file: "rlx_cli", tmp_path / "cli/good.py": None}, faces)
        assert found == [
            f"{bad_file}:1: rlx_controller.driver",
            f"{bad_file}:2: rlx_launch._x",
        ]
        # a package's own modules are not behind its face
        assert past_the_faces({bad_file: "rlx_controller"}, faces) == [
            f"{bad_file}:2: rlx_launch._x"
        ]
    elif rule == "private name":
        found = private_imports({bad_file: "rlx_cli", tmp_path / "cli/good.py": "rlx_cli"})
        assert found == [
            f"{bad_file}:1: rlx_core.rpc _handlers",
            f"{bad_file}:2: rlx_model._impl _impl",
        ]
        assert private_imports({bad_file: "rlx_core"}) == [f"{bad_file}:2: rlx_model._impl _impl"]
    else:
        found = launch_imports(tmp_path / "cli")
        assert found == [f"{bad_file}:3: rlx_controller", f"{bad_file}:2: rlx_launch.local"]
