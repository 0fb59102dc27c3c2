"""Run directory and work directory of a run (rlx_controller.rundir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlx_controller.rundir import RunPaths, default_work_dir, is_remote, sweep_temporaries
from rlx_core.errors import InvalidArgument


def test_a_local_run_directory_is_its_own_work_directory(tmp_path: Path) -> None:
    for uri in (str(tmp_path / "r"), f"file://{tmp_path}/r"):
        paths = RunPaths.of(uri)
        assert paths.uri == str(tmp_path / "r") and paths.work == tmp_path / "r"
        assert not paths.remote and not is_remote(uri)
    assert RunPaths.of(tmp_path / "r", tmp_path / "r").work == tmp_path / "r"


def test_a_different_work_directory_for_a_local_run_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"work_dir: .*other.*s3:// and gs://"):
        RunPaths.of(tmp_path / "r", tmp_path / "other")


def test_a_remote_run_works_in_the_user_cache_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gcs_env: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    paths = RunPaths.of("s3://bucket/runs/r1/")
    assert paths.remote and paths.uri == "s3://bucket/runs/r1"
    assert paths.work == tmp_path / "cache" / "rlx" / "runs" / "s3" / "bucket" / "runs" / "r1"
    assert default_work_dir("gs://b") == tmp_path / "cache" / "rlx" / "runs" / "gs" / "b"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_work_dir("gs://b/p") == tmp_path / "home" / ".cache" / "rlx/runs/gs/b/p"
    assert RunPaths.of("gs://b/p", tmp_path / "w").work == tmp_path / "w"


def test_the_sweep_removes_only_temporaries_and_only_under_the_swept_folders(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    kept = ["rollouts/b0.rec", "checkpoints/step_2/a.bin", "config.toml", ".rlx-tmp-1-x"]
    kept += ["data/.rlx-tmp-2-y"]  # outside rollouts/, snapshots/, checkpoints/: not ours
    swept = ["rollouts/.rlx-tmp-3-b1.rec", "checkpoints/step_2/.rlx-tmp-4-a.bin"]
    swept += ["snapshots/.rlx-tmp-5-s.json"]
    for name in kept + swept:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x")
    assert sweep_temporaries(run) == sorted(swept)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()) == sorted(
        kept
    )
    assert sweep_temporaries(run) == []  # nothing left to sweep
    assert sweep_temporaries("s3://bucket/runs/r1") == []  # a remote run's writes are uploads
