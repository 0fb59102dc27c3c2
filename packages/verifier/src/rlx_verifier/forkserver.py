"""The trusted fork server that runs inside one long-lived bubblewrap sandbox (stdlib only).

`Sandbox` starts bubblewrap once per worker with the same isolation as a per-run sandbox and this
file as its program (`python3 -I -S -B forkserver.py FD`, FD a SOCK_SEQPACKET socket to the
verifier). The server itself runs as root of the sandbox with only the capabilities it needs
(SETUID, SETGID, SETPCAP, SYS_ADMIN, KILL) and an empty bounding set (emptied at start: no program
it starts can regain a capability through exec). For each request (a JSON message carrying the
stdin, stdout and stderr descriptors and the write end of the request's report pipe) it:

1. clones the run's init into fresh PID, mount and IPC namespaces; the init mounts a fresh /proc
   (only the run's processes are visible), a fresh size-capped tmpfs on /tmp (the work
   directory), binds the program's build (and its language's toolchain) read-only, detaches the
   server's own mounts and covers /rlx with an empty read-only tmpfs;
2. the init forks the program: `setsid`, stdio, every other descriptor closed, groups cleared,
   the server's sandbox uid (no capabilities left), no_new_privs, rlimits (CPU, address space,
   processes, file size, open files, no core files), cleared environment, then `execve`;
3. when the program exits the init SIGKILLs everything left in the namespace, reaps it, and
   writes the report (exit status, CPU time, wall time, peak RSS from wait4) straight to the
   verifier; a wall-clock timeout makes the server SIGKILL the init, which takes the whole
   namespace with it, and report the timeout.

Nothing of one run (process, file, SysV IPC object, mount) outlives it: the namespaces that held
them die with the init before the next request is read.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import resource
import select
import signal
import socket
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAP_VERSION_3 = 0x20080522
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
EXEC_FAILED = 127

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
with open("/proc/sys/kernel/cap_last_cap") as _f:
    CAP_LAST = int(_f.read())


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str = "") -> None:
    ret = libc.mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(ret, f"mount {dst}")


def _empty_bounding_set() -> None:
    """Done once by the server: it keeps its own capabilities (permitted, effective), but no
    program it starts can ever regain one through exec."""
    for cap in range(CAP_LAST + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def _drop_privileges(uid: int | None) -> None:
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all empty
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _program(req: dict, fds: list[int], failed: int) -> None:
    """The run's program (pid 2 of the run's namespace): never returns. Why it could not be
    started goes to `failed` (close-on-exec: an empty read means the exec happened)."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target, inheritable=True)
        os.closerange(3, failed)
        os.closerange(failed + 1, 65536)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(req["cwd"])
        with open("/proc/self/oom_score_adj", "w") as f:  # the OOM killer's first choice
            f.write("1000")
        _drop_privileges(req["uid"])
        lim = req["limits"]
        for res, soft, hard in (
            (resource.RLIMIT_CPU, lim["cpu"], lim["cpu"] + 1),
            (resource.RLIMIT_AS, lim["as"], lim["as"]),
            (resource.RLIMIT_NPROC, lim["nproc"], lim["nproc"]),
            (resource.RLIMIT_FSIZE, lim["fsize"], lim["fsize"]),
            (resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
            (resource.RLIMIT_CORE, 0, 0),
        ):
            resource.setrlimit(res, (soft, hard))
        os.execve(req["argv"][0], req["argv"], req["env"])
    except BaseException as e:  # report whatever stopped the exec, then die
        try:
            os.write(failed, f"cannot start the program: {type(e).__name__}: {e}".encode())
        finally:
            os._exit(EXEC_FAILED)


def _init(req: dict, fds: list[int], report: int, done: int, received: float) -> None:
    """The run's init (pid 1 of a fresh PID namespace): reports straight to the verifier, then
    tells the server it did; never returns."""
    result: dict = {}
    marks = {"received": received, "init": time.monotonic()}
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        tmp = f"size={req['limits']['tmp']},nr_inodes={req['limits']['tmp_inodes']},mode=1777"
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
        for src, dst in req["binds"]:
            _mount(src, dst, None, MS_BIND | MS_REC)
            _mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        for path in req["hide"]:  # the server's own mounts (script, scratch root, toolchains)
            _check(libc.umount2(path.encode(), MNT_DETACH), f"umount {path}")
        _mount("tmpfs", "/rlx", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
        failed_r, failed_w = os.pipe()  # both close-on-exec
        start = marks["mounted"] = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _program(req, fds, failed_w)
        os.close(failed_w)
        for fd in fds:
            os.close(fd)
        why = os.read(failed_r, 4096)
        marks["execed"] = time.monotonic()
        os.close(failed_r)
        cpu, rss = 0.0, 0
        while True:  # reap orphans too until the program itself is done
            child, status, ru = os.wait4(-1, 0)
            cpu += ru.ru_utime + ru.ru_stime
            rss = max(rss, ru.ru_maxrss)
            if child == pid:
                break
        marks["reaped"] = time.monotonic()
        wall = marks["reaped"] - start
        # Whatever the program left behind (daemons, stopped children) dies now.
        while True:
            with contextlib.suppress(ProcessLookupError):  # none left to signal
                os.kill(-1, signal.SIGKILL)
            try:
                os.wait4(-1, 0)
            except ChildProcessError:
                break
        marks["cleaned"] = time.monotonic()
        if why:
            raise RuntimeError(why.decode(errors="replace"))
        result = {"status": status, "cpu": cpu, "rss": rss, "wall": wall, "marks": marks}
    except BaseException as e:  # the sandbox's failure, not the program's
        result = {"error": f"{type(e).__name__}: {e}"}
    try:
        _send(report, result)
        os.write(done, b"1")
    finally:
        os._exit(0)


def _clone_run_namespaces() -> int:
    """fork() into new PID, mount and IPC namespaces: 0 in the child (pid 1 of its namespace),
    the child's pid in the server.

    A process can unshare a PID namespace only once, so each run's is made by a raw clone
    (fork semantics: no new stack; this server is single-threaded).
    """
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | signal.SIGCHLD
    pid = int(libc.syscall(SYS_CLONE, ctypes.c_ulong(flags), None, None, None, None))
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def _serve_one(req: dict, fds: list[int], report: int) -> dict | None:
    """Start one run; None once its init has reported to the verifier itself, else the report
    the server owes (timeout, or an init that died without one)."""
    done_r, done_w = os.pipe()
    received = time.monotonic()
    try:
        pid = _clone_run_namespaces()
        if pid == 0:
            os.close(done_r)
            _init(req, fds, report, done_w, received)
    finally:
        os.close(done_w)
        for fd in fds:
            os.close(fd)
    try:
        ready, _, _ = select.select([done_r], [], [], req["wall"])
        if not ready:  # the wall clock ran out: the init's death kills the whole namespace
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}  # (if the init had just reported, the verifier has that)
        if not os.read(done_r, 1):
            os.waitpid(pid, 0)
            return {"error": "the run's init died without a report"}
    finally:
        os.close(done_r)
    # The init reported after every process of the run was reaped; its own exit (namespace
    # teardown) overlaps with the verifier reading the report and sending the next request.
    return None


def _send(report: int, reply: dict) -> None:
    with contextlib.suppress(OSError):  # the verifier gave up on this run
        os.write(report, json.dumps(reply).encode() + b"\n")


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a report pipe the verifier closed
    _empty_bounding_set()
    # No garbage collection: the server allocates little, and a collection in a forked child
    # would touch (copy) every page of the parent's heap.
    gc.disable()
    gc.freeze()
    sock.send(b'{"ready": true}')
    while True:
        # a request: JSON, and stdin, stdout, stderr and the write end of its report pipe
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        if not msg:
            return
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        while True:  # reap earlier inits, whose namespaces are already empty
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        report = fds.pop()
        try:
            reply = _serve_one(json.loads(msg), fds, report)
        except Exception as e:  # reported as a sandbox failure (INFRA)
            reply = {"error": f"{type(e).__name__}: {e}"}
        if reply is not None:
            _send(report, reply)
        os.close(report)


if __name__ == "__main__":
    main()
