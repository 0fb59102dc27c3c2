"""rlx_testing's own helpers: the token file, `tree`, and `ServiceProcess` against real child
processes (a service that never prints an address fails the test with its exit code and stderr)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from rlx_core.rpc import resolve_token
from rlx_testing import TOKEN, WRONG_TOKEN, ServiceProcess, tree, write_token_file


def test_token_file_is_private_and_holds_the_token(token_file: Path, tmp_path: Path) -> None:
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert resolve_token(token_file=token_file) == TOKEN
    other = write_token_file(tmp_path / "other", WRONG_TOKEN)
    assert resolve_token(token_file=other) == WRONG_TOKEN != TOKEN


def test_tree_sees_every_byte_and_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    before = tree(tmp_path)
    assert before == {"d": None, "d/f": b"x"}
    (tmp_path / "d" / "f").write_bytes(b"y")
    assert tree(tmp_path) != before
    assert tree(tmp_path / "missing") == {}


def test_a_process_that_prints_no_address_fails_with_its_stderr() -> None:
    script = "import sys; sys.stderr.write('no port for you'); sys.exit(3)"
    with pytest.raises(pytest.fail.Exception, match=r"(?s)\(exit 3\).*no port for you"):
        ServiceProcess([sys.executable, "-c", script])


def test_stop_and_finish_report_the_exit_code_and_stderr() -> None:
    # stderr first: it is written before the address is read
    script = "import sys, time; print('bye', end='', file=sys.stderr, flush=True); "
    script += "print('127.0.0.1:1', flush=True); "
    with ServiceProcess([sys.executable, "-c", script + "sys.exit(5)"], token=None) as done:
        assert done.address == "127.0.0.1:1"
        assert done.finish() == (5, "bye")
    sleeper = ServiceProcess([sys.executable, "-c", script + "time.sleep(60)"], token=None)
    assert sleeper.stop() == -15  # SIGTERM
    assert sleeper.stderr() == "bye"
