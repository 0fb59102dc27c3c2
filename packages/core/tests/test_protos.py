"""The committed generated code must be exactly what tools/gen_protos produces."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "gen_protos" / "gen_protos.py"


def test_generated_proto_code_matches_sources() -> None:
    result = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_every_proto_has_generated_modules() -> None:
    proto_dir = ROOT / "packages/core/src/rlx_core/proto"
    protos = sorted(proto_dir.rglob("*.proto"))
    assert protos, "no .proto files found"
    for proto in protos:
        stem = proto.with_suffix("")
        assert Path(f"{stem}_pb2.py").exists(), proto
        assert Path(f"{stem}_pb2.pyi").exists(), proto
