"""Regenerate the committed protobuf/gRPC code from the .proto files under rlx_core/proto.

Usage (from the repository root):
    uv run python tools/gen_protos/gen_protos.py            # rewrite the committed files
    uv run python tools/gen_protos/gen_protos.py --check    # exit 1 and list drift, write nothing

The generator is grpcio-tools at the exact version pinned in the root pyproject.toml, so the output
is byte-for-byte reproducible; a test (packages/core/tests/test_protos.py) runs `--check`.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "packages" / "core" / "src"
PROTO_DIR = SRC / "rlx_core" / "proto"
PINNED_GRPCIO_TOOLS = "1.85.1"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files() -> list[Path]:
    """Every .proto under rlx_core/proto, relative to the src root (their import root)."""
    return sorted(p.relative_to(SRC) for p in PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc into out_dir; return the generated files relative to out_dir."""
    from grpc_tools import protoc  # imported here: only this tool needs grpcio-tools

    have = importlib.metadata.version("grpcio-tools")
    if have != PINNED_GRPCIO_TOOLS:
        raise SystemExit(
            f"grpcio-tools {have} is installed but {PINNED_GRPCIO_TOOLS} is pinned; "
            "run `uv sync` at the repository root"
        )
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{SRC}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(SRC / p) for p in proto_files()],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed (see above)")
    generated = sorted(p.relative_to(out_dir) for p in out_dir.rglob("*") if p.is_file())
    # grpc_python_out writes a _pb2_grpc.py for every file, even one without services; keep only
    # those that define a service so the tree has no empty modules.
    kept = []
    for rel in generated:
        path = out_dir / rel
        if rel.name.endswith("_pb2_grpc.py") and "class " not in path.read_text():
            path.unlink()
            continue
        kept.append(rel)
    return kept


def committed_files() -> list[Path]:
    """The generated files currently in the tree, relative to the src root."""
    return sorted(p.relative_to(SRC) for p in PROTO_DIR.rglob("*") if p.name.endswith(SUFFIXES))


def drift() -> list[str]:
    """Human-readable differences between the committed and the freshly generated files."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        fresh = generate(out)
        problems = []
        for rel in fresh:
            target = SRC / rel
            if not target.exists():
                problems.append(f"missing: {rel}")
            elif not filecmp.cmp(out / rel, target, shallow=False):
                problems.append(f"differs: {rel}")
        problems += [
            f"stale (no .proto generates it): {rel}"
            for rel in committed_files()
            if rel not in set(fresh)
        ]
        return problems


def write() -> list[Path]:
    """Regenerate in place: replace every generated file, remove stale ones."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        fresh = generate(out)
        for rel in committed_files():
            if rel not in set(fresh):
                (SRC / rel).unlink()
        for rel in fresh:
            target = SRC / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((out / rel).read_bytes())
            # every directory on the way needs an __init__.py to be importable as a package
            for parent in target.relative_to(SRC).parents:
                if str(parent) != "." and parent != Path("rlx_core"):
                    init = SRC / parent / "__init__.py"
                    if not init.exists():
                        init.write_text("")
        return fresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = drift()
        for line in problems:
            print(line)
        if problems:
            print("generated proto code is out of date: run tools/gen_protos/gen_protos.py")
            return 1
        print(f"{len(proto_files())} proto files, generated code up to date")
        return 0
    for rel in write():
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
