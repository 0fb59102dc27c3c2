"""The fork-server runner: one run's leftovers never reach the next, each run gets the full
isolation, a dead fork server is INFRA (then replaced), and the per-run runner stays available."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_core.errors import ConfigError
from rlx_verifier import TestCase, Verifier
from rlx_verifier.config import JudgeConfig


def sandbox_processes(v: Verifier) -> list[int]:
    """Host pids running as one of this verifier's sandbox uids."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if uid in v.sandbox.uid_range:
            found.append(int(pid))
    return found


# Run 1 leaves everything it can: files in every writable place, a daemon (double fork, new
# session, ignoring SIGTERM/SIGHUP) that listens on a loopback port and keeps writing a file, a
# stopped child, and a POSIX shared-memory object.
LEAVE = r"""
import os, signal, socket, sys, time
written = []
for d in ("/tmp", "/dev/shm", "/var/tmp", "/prog", "/", "/etc", "/rlx", os.getcwd()):
    try:
        with open(os.path.join(d, "leftover-file"), "w") as f:
            f.write("from run 1")
        written.append(d)
    except OSError:
        pass
try:
    fd = os.open("/dev/shm/leftover-shm", os.O_CREAT | os.O_RDWR, 0o666)
    written.append("shm")
except OSError:
    pass
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 47123))
srv.listen()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while True:
            with open("/tmp/daemon-alive", "w") as f:
                f.write(str(time.time()))
            time.sleep(0.01)
    os._exit(0)
child = os.fork()
if child == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
time.sleep(0.2)
print(" ".join(written))
print(os.readlink("/proc/self/ns/net"), os.readlink("/proc/self/ns/pid"))
"""

# Run 2 reports what it can see of run 1.
LOOK = r"""
import json, os, socket
seen = []
for root, dirs, files in os.walk("/", topdown=True):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/usr")]
    seen += [os.path.join(root, f) for f in files if "leftover" in f or "daemon" in f]
s = socket.socket()
s.settimeout(0.5)
port_open = s.connect_ex(("127.0.0.1", 47123)) == 0
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({"seen": seen, "port_open": port_open, "pids": pids, "me": os.getpid(),
                  "ns": [os.readlink("/proc/self/ns/net"), os.readlink("/proc/self/ns/pid")]}))
"""

# What a run sees of its own privileges and limits.
SELF = r"""
import json, os, resource, socket
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1).close()
    net = "open"
except OSError:
    net = "blocked"
try:
    open("/etc/shadow").read()
    shadow = "read"
except OSError:
    shadow = "blocked"
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups(),
    "caps": [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "nnp": status["NoNewPrivs"].strip(), "pid": os.getpid(), "sid": os.getsid(0),
    "env": sorted(os.environ), "cwd": os.getcwd(), "tmp": os.listdir("/tmp"),
    "rlx": os.listdir("/rlx") if os.path.isdir("/rlx") else [],
    "limits": {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n))
               for n in ("CPU", "AS", "NPROC", "FSIZE", "NOFILE", "CORE")},
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "net": net, "shadow": shadow, "prog_writable": os.access("/prog", os.W_OK),
}))
"""


@pytest.fixture(scope="module")
def one_worker() -> Iterator[Verifier]:
    """One worker, no cache: consecutive runs go through the same fork server."""
    v = Verifier(JudgeConfig(workers=1, cache_size=0, infra_retries=0))
    assert v.sandbox.mode == "bwrap-root-forkserver"
    yield v
    v.close()


def run_py(v: Verifier, source: str, time_limit_s: float = 5.0) -> bytes:
    lang = v.languages["python"]
    build, ce = v._build(lang, source)
    assert ce is None
    try:
        r = v._execute(lang, build, b"", v._limits(lang, time_limit_s, 256))
    finally:
        import shutil

        shutil.rmtree(build, ignore_errors=True)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def test_a_run_leaves_nothing_for_the_next(one_worker: Verifier) -> None:
    first = run_py(one_worker, LEAVE).decode().splitlines()
    assert "/tmp" in first[0].split()  # run 1 could write somewhere, and did
    net_ns, pid_ns = first[1].split()
    # Nothing of run 1 is left on the host either: no process of a sandbox uid.
    assert sandbox_processes(one_worker) == []
    time.sleep(0.3)  # a surviving daemon would have rewritten its file by now
    second = json.loads(run_py(one_worker, LOOK))
    assert second["ns"][0] == net_ns  # the same long-lived sandbox (same network namespace)...
    assert second["ns"][1] != pid_ns  # ...but a fresh PID namespace
    assert second["seen"] == []  # no file of run 1 anywhere
    assert second["port_open"] is False  # its daemon's listening socket is gone
    assert second["pids"] == [1, second["me"]]  # only its own init and itself
    assert sandbox_processes(one_worker) == []


def test_each_run_is_isolated_and_limited(one_worker: Verifier) -> None:
    me = json.loads(run_py(one_worker, SELF, time_limit_s=3.0))
    assert me["uid"] >= 61000 and me["euid"] == me["uid"] and me["groups"] == []
    assert me["caps"] == ["0000000000000000"] * 5
    assert me["nnp"] == "1"
    assert me["pid"] == me["sid"] == 2  # own session, pid 2 of its own namespace
    assert me["env"] == ["HOME", "LANG", "PATH"]
    assert me["cwd"] == "/tmp" and me["tmp"] == []
    assert me["rlx"] == []  # the server's files and the scratch root are not visible
    assert me["fds"] == [0, 1, 2, 3]  # stdio (+ the listing's own descriptor)
    assert me["net"] == "blocked" and me["shadow"] == "blocked"
    assert me["prog_writable"] is False
    mib = 1 << 20
    assert me["limits"] == {
        "CPU": [3, 4],
        "AS": [256 * mib, 256 * mib],
        "NPROC": [16, 16],
        "FSIZE": [16 * mib, 16 * mib],
        "NOFILE": [64, 64],
        "CORE": [0, 0],
    }


def fork_server_pids(v: Verifier) -> list[int]:
    """The fork servers of `v`: python processes two levels below a bubblewrap whose command
    line binds v's scratch root (other verifiers on this machine are left alone)."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, bytes] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmdlines[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    ours = {p for p, c in cmdlines.items() if v.sandbox.scratch_root.encode() in c}
    servers = {
        p
        for p, c in cmdlines.items()
        if c.startswith(b"/usr/bin/python3")
        and b"/rlx/forkserver.py" in c
        and parents.get(parents.get(p, 0), 0) in ours
    }
    # a program a server forked has its command line until it is reaped: not a server
    return sorted(p for p in servers if parents.get(p) not in servers)


def test_a_dead_fork_server_is_infra_then_replaced() -> None:
    with Verifier(JudgeConfig(workers=1, cache_size=0, infra_retries=0)) as v:
        assert v.run_program("python", "print(1)").status == "AC"  # the server is up
        before = fork_server_pids(v)
        assert len(before) == 1
        verdicts: list[str] = []
        slow = threading.Thread(
            target=lambda: verdicts.append(
                v.run_program("python", "import time\ntime.sleep(30)", time_limit_s=60).status
            )
        )
        slow.start()
        deadline = time.monotonic() + 30
        while not sandbox_processes(v) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the program runs
        assert sandbox_processes(v)
        os.kill(before[0], signal.SIGKILL)
        slow.join(timeout=60)
        assert verdicts == ["INFRA"]  # the verifier's failure, never a WA/RE/TLE
        assert sandbox_processes(v) == []  # the sleeping program died with its sandbox
        ok = v.judge("python", "print(int(input()) * 2)", [TestCase(stdin="21", answer="42")])
        assert ok.status == "AC"  # a new server took over
        after = fork_server_pids(v)
        assert len(after) == 1 and after != before


def test_per_run_runner_stays_available() -> None:
    with Verifier(JudgeConfig(workers=1, sandbox_runner="per-run")) as v:
        assert v.sandbox.mode == "bwrap-root-setpriv"
        r = v.judge("python", "print(int(input()) + 1)", [TestCase(stdin="1", answer="2")])
        assert r.status == "AC"
    with pytest.raises(ConfigError, match="sandbox_runner"):
        JudgeConfig(sandbox_runner="none")
