"""Run one untrusted command in a bubblewrap sandbox with rlimits, a wall clock and capped output.

As root (CI, containers) bubblewrap sets up the mounts with real privileges, then `setpriv` drops to
an unprivileged uid (`uid_base` + a slot) with an empty bounding set and no_new_privs, so
RLIMIT_NPROC is enforced (the kernel exempts uid 0 from it). As a normal user bubblewrap runs in a
new user namespace with every capability dropped.

Isolation: new PID, IPC, UTS, network (only a private loopback) and cgroup namespaces; read-only
/usr (and the toolchain directories a language binds), no /etc apart from the few files runtimes
need, a private size-capped tmpfs /tmp as the working directory, a cleared environment,
`--die-with-parent` and `--new-session`. `prlimit` applies CPU, address space, process, file size
and open-file limits and disables core files. stdout and stderr go to files in a root-only scratch
directory, capped by RLIMIT_FSIZE (a program writing more gets SIGXFSZ).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlx_core.errors import FailedPrecondition, Unavailable

__all__ = ["Limits", "RunResult", "Sandbox", "SandboxError"]

PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"
PATH = "/usr/local/bin:/usr/bin:/bin"
# /etc files runtimes read; everything else of /etc (shadow, passwd, hosts, ...) stays out.
ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/java-17-openjdk", "/etc/localtime")
STDERR_KEEP = 4096  # bytes of stderr kept in results
SLOTS = 16  # concurrent runs per Sandbox, each with its own uid


class SandboxError(Unavailable):
    """The sandbox itself failed (bubblewrap could not start, scratch space full): INFRA."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Resource limits of one sandboxed process tree."""

    cpu_s: float = 2.0  # CPU seconds per process (SIGXCPU, then SIGKILL 1 s later)
    wall_s: float = 5.0  # wall-clock seconds for the whole run; then the tree is killed
    memory_mb: int = 256  # address space (RLIMIT_AS) per process, MiB
    nproc: int = 64  # processes and threads of the sandbox uid
    output_mb: int = 16  # largest file written (stdout and stderr included), MiB
    nofile: int = 64  # open file descriptors
    tmp_mb: int = 64  # size of the private /tmp tmpfs, MiB


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What one sandboxed run did."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None  # the signal that ended it, if any
    cpu_s: float  # user + system CPU that reached bwrap (the PID namespace hides most of it)
    wall_s: float
    max_rss_kb: int  # peak RSS of the largest process, launcher included (an upper bound)
    wall_timeout: bool  # killed by the wall clock
    output_limit: bool  # a write went past `output_mb` (SIGXFSZ)
    stdout: bytes = b""
    stderr: bytes = b""  # the first STDERR_KEEP bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class _Scratch:
    path: str
    files: list[str] = field(default_factory=list)


def _decode_status(code: int) -> tuple[int | None, int | None]:
    """bubblewrap exits with the child's code, or 128 + signal when the child was killed."""
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return None, code - 128
    return code, None


class Sandbox:
    """Runs commands in bubblewrap (or, only when `unsafe` is set, directly with rlimits)."""

    def __init__(self, *, unsafe: bool = False, uid_base: int = 61000) -> None:
        self.bwrap = shutil.which("bwrap")
        self.unsafe = unsafe
        if self.bwrap is None and not unsafe:
            raise FailedPrecondition(
                "bubblewrap (bwrap) is not installed: the verifier refuses to run untrusted code "
                "(install it, e.g. `apt-get install bubblewrap`, or set unsafe_no_sandbox = true)"
            )
        if not os.path.exists(PRLIMIT):
            raise FailedPrecondition(f"{PRLIMIT} (util-linux) is missing: cannot set rlimits")
        self.root = os.geteuid() == 0
        # One uid per concurrent run, so one run's fork bomb cannot starve another's NPROC.
        first = uid_base + (os.getpid() % 1000) * SLOTS
        self._uids: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(SLOTS):
            self._uids.put(first + i if self.root else os.geteuid())
        self.scratch_root = tempfile.mkdtemp(prefix="rlx-verifier-")
        os.chmod(self.scratch_root, 0o700)

    @property
    def mode(self) -> str:
        if self.unsafe and self.bwrap is None:
            return "unsafe-no-sandbox"
        if self.unsafe:
            return "unsafe-no-sandbox (bwrap present but disabled)"
        return "bwrap-root-setpriv" if self.root else "bwrap-userns"

    def workdir(self) -> str:
        """A fresh host directory under the root-only scratch root (caller removes it); bound
        read-write, sandboxed code may write into it (compilers' output)."""
        path = tempfile.mkdtemp(dir=self.scratch_root)
        os.chmod(path, 0o777)
        return path

    def close(self) -> None:
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    def _prlimit(self, limits: Limits) -> list[str]:
        cpu = max(1, math.ceil(limits.cpu_s))
        return [
            PRLIMIT,
            f"--cpu={cpu}:{cpu + 1}",
            f"--as={limits.memory_mb << 20}",
            f"--nproc={limits.nproc}",
            f"--fsize={limits.output_mb << 20}",
            f"--nofile={limits.nofile}",
            "--core=0",
            "--",
        ]

    def _bwrap(
        self,
        limits: Limits,
        ro_binds: Sequence[tuple[str, str]],
        rw_binds: Sequence[tuple[str, str]],
        cwd: str,
        env: Mapping[str, str],
        info_fd: int,
        uid: int,
    ) -> list[str]:
        assert self.bwrap is not None
        args = [self.bwrap, "--die-with-parent", "--new-session", "--clearenv"]
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        args += ["--unshare-cgroup-try"]
        if self.root:
            # Mount as root, then setpriv drops to the sandbox uid; only these caps survive.
            args += ["--cap-drop", "ALL"]
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                args += ["--cap-add", cap]
        else:
            args += ["--unshare-user", "--cap-drop", "ALL"]
        args += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "sbin"):
            target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
            if target is not None:
                args += ["--symlink", target, f"/{name}"]
            elif os.path.isdir(f"/{name}"):
                args += ["--ro-bind", f"/{name}", f"/{name}"]
        args += ["--perms", "0755", "--dir", "/etc"]
        for path in ETC_FILES:
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp"]
        for host, dest in ro_binds:
            args += ["--perms", "0755", "--dir", os.path.dirname(dest) or "/"]
            args += ["--ro-bind", host, dest]
        for host, dest in rw_binds:
            args += ["--perms", "0755", "--dir", os.path.dirname(dest) or "/"]
            args += ["--bind", host, dest]
        for key, value in {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **env}.items():
            args += ["--setenv", key, value]
        args += ["--chdir", cwd, "--info-fd", str(info_fd), "--"]
        if self.root:
            args += [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            args += ["--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
        return args

    def run(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        stdin: bytes | str | None = None,
        stdin_path: str | None = None,
        ro_binds: Sequence[tuple[str, str]] = (),
        rw_binds: Sequence[tuple[str, str]] = (),
        cwd: str = "/tmp",
        env: Mapping[str, str] | None = None,
        keep_stdout: bool = True,
    ) -> RunResult:
        """Run `argv` (paths as seen inside the sandbox) and wait for it, at most `wall_s`.

        `ro_binds`/`rw_binds` are (host path, sandbox path) pairs. Raises SandboxError when the
        sandbox could not be set up (never reported as the program's fault).
        """
        scratch = tempfile.mkdtemp(dir=self.scratch_root)
        uid = self._uids.get()
        try:
            return self._run(
                argv,
                limits,
                stdin,
                stdin_path,
                ro_binds,
                rw_binds,
                cwd,
                env or {},
                scratch,
                keep_stdout,
                uid,
            )
        finally:
            self._uids.put(uid)
            shutil.rmtree(scratch, ignore_errors=True)

    def _run(
        self,
        argv: Sequence[str],
        limits: Limits,
        stdin: bytes | str | None,
        stdin_path: str | None,
        ro_binds: Sequence[tuple[str, str]],
        rw_binds: Sequence[tuple[str, str]],
        cwd: str,
        env: Mapping[str, str],
        scratch: str,
        keep_stdout: bool,
        uid: int,
    ) -> RunResult:
        if stdin_path is None:
            stdin_path = os.path.join(scratch, "stdin")
            data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
            with open(stdin_path, "wb") as f:
                f.write(data)
        out_path, err_path = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        info_r, info_w = os.pipe()
        sandboxed = not self.unsafe
        if sandboxed:
            cmd = self._bwrap(limits, ro_binds, rw_binds, cwd, env, info_w, uid)
            cmd += self._prlimit(limits) + list(argv)
            popen_cwd = None
            popen_env = {}
        else:
            cmd = self._prlimit(limits) + [self._unsafe_path(a, ro_binds, rw_binds) for a in argv]
            popen_cwd = scratch
            popen_env = {"PATH": PATH, "HOME": scratch, "LANG": "C.UTF-8", **env}
        try:
            with (
                open(stdin_path, "rb") as fin,
                open(out_path, "wb") as fout,
                open(err_path, "wb") as ferr,
            ):
                start = time.monotonic()
                try:
                    proc = subprocess.Popen(
                        cmd,
                        stdin=fin,
                        stdout=fout,
                        stderr=ferr,
                        cwd=popen_cwd,
                        env=popen_env,
                        pass_fds=(info_w,) if sandboxed else (),
                        start_new_session=True,
                    )
                except OSError as e:
                    raise SandboxError(f"cannot start the sandbox: {e}") from None
        finally:
            os.close(info_w)
        status, rusage, timed_out = self._wait(proc, limits.wall_s)
        wall = time.monotonic() - start
        with os.fdopen(info_r, "rb") as info:
            started = bool(info.read()) or not sandboxed
        stderr = _read_head(err_path, STDERR_KEEP)
        if not started:
            raise SandboxError(f"bubblewrap failed: {stderr.decode(errors='replace').strip()}")
        code: int | None
        sig: int | None
        if os.WIFSIGNALED(status):
            code, sig = None, os.WTERMSIG(status)
        else:
            code, sig = _decode_status(os.WEXITSTATUS(status))
        return RunResult(
            exit_code=code,
            signal=sig,
            cpu_s=rusage.ru_utime + rusage.ru_stime,
            wall_s=wall,
            max_rss_kb=int(rusage.ru_maxrss),
            wall_timeout=timed_out,
            # Python ignores SIGXFSZ and fails the write instead: look at the sizes too.
            output_limit=sig == signal.SIGXFSZ
            or max(os.path.getsize(out_path), os.path.getsize(err_path)) >= limits.output_mb << 20,
            stdout=_read_head(out_path, limits.output_mb << 20) if keep_stdout else b"",
            stderr=stderr,
        )

    @staticmethod
    def _wait(
        proc: subprocess.Popen[bytes], wall_s: float
    ) -> tuple[int, resource.struct_rusage, bool]:
        """Wait for the process tree; kill it all when the wall clock runs out."""
        timed_out = False
        pidfd = os.pidfd_open(proc.pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], wall_s)
            if not ready:
                timed_out = True
                # The session holds bwrap; the PID namespace dies with its init (bwrap).
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if not timed_out:
            # Orphans that left the session (unsafe mode) or a slow namespace teardown.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        return status, rusage, timed_out

    @staticmethod
    def _unsafe_path(
        arg: str, ro_binds: Sequence[tuple[str, str]], rw_binds: Sequence[tuple[str, str]]
    ) -> str:
        """Without a sandbox, sandbox paths in arguments map back to their host paths."""
        for host, dest in [*ro_binds, *rw_binds]:
            if arg == dest or arg.startswith(dest + "/"):
                return host + arg[len(dest) :]
        return arg


def _read_head(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)
