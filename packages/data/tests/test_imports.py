"""rlx_data sits under the controller and the CLI: it imports rlx_core and no other rlx package
(no cycle with rlx_controller or rlx_launch), and its face re-exports every module's public
names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import rlx_data

SRC = Path(rlx_data.__file__).parent


def test_rlx_data_imports_only_rlx_core() -> None:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found |= {(path.name, a.name.split(".")[0]) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((path.name, node.module.split(".")[0]))
    rlx = {(f, m) for f, m in found if m.startswith("rlx_")}
    assert ("datasets.py", "rlx_core") in rlx  # the scan sees imports
    assert not {(f, m) for f, m in rlx if m not in ("rlx_core", "rlx_data")}


def test_the_face_holds_every_modules_public_names() -> None:
    for module in ("datasets", "code_tasks", "gold_answers", "demo", "code_demo"):
        mod = importlib.import_module(f"rlx_data.{module}")
        assert set(mod.__all__) <= set(rlx_data.__all__), module
        assert all(getattr(rlx_data, n) is getattr(mod, n) for n in mod.__all__), module
