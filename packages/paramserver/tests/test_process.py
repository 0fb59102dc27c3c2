"""`rlx-paramserver` as a real process: its flags, a restart that comes back empty and says so,
and the server's peak memory while it holds N versions and receives one more."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlx_core.clients import ParamServerClient
from rlx_core.errors import NotFound
from rlx_testing import TOKEN, ServiceProcess, console_script


class Server(ServiceProcess):
    """`rlx-paramserver --port 0 ARGS`, READY."""

    def __init__(self, *args: str) -> None:
        argv = [console_script("rlx-paramserver"), "--port", "0", *args]
        super().__init__(argv, env={**os.environ, "RLX_TOKEN": TOKEN})

    def status(self, key: str) -> int:
        """A /proc/PID/status memory figure in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(key)

    def store(self) -> str:
        """The server's directory of chunk files on /dev/shm."""
        (root,) = glob.glob(f"/dev/shm/rlx-psstore-{self.proc.pid}-*")
        return root


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


@pytest.mark.integration
def test_flags_and_an_empty_restart(servers: list[Server]) -> None:
    servers.append(Server("--replica-id", "2", "--max-versions", "1"))
    first = servers[0]
    with ParamServerClient(first.address, token=TOKEN) as client:
        info = client.versions_info()
        assert (info.replica_id, info.max_versions, info.versions) == (2, 1, ())
        client.push(1, {"w": np.arange(10.0)})
        client.push(2, {"w": np.arange(10.0) + 1})
        assert client.versions() == [2]  # max_versions=1: the commit of 2 evicted 1
        old_instance = info.instance_id
    store = first.store()
    assert os.listdir(store)  # version 2's files
    first.stop()
    assert not os.path.exists(store)  # SIGTERM: the server removed its files
    servers.append(Server("--replica-id", "2", "--max-versions", "1"))
    with ParamServerClient(servers[1].address, token=TOKEN) as client:
        info = client.versions_info()
        assert info.versions == () and info.instance_id != old_instance
        with pytest.raises(NotFound, match=r"replica 2 holds no versions.*restarted replica"):
            client.pull()


@pytest.mark.integration
def test_a_killed_servers_files_are_removed_by_the_next(servers: list[Server]) -> None:
    servers.append(Server())
    with ParamServerClient(servers[0].address, token=TOKEN) as client:
        client.push(1, {"w": np.arange(10.0)})
    store = servers[0].store()
    servers[0].proc.send_signal(signal.SIGKILL)
    servers[0].proc.communicate(timeout=30)
    assert os.path.isdir(store)  # nobody cleaned up
    servers.append(Server())
    assert not os.path.exists(store)


def tree_bytes(root: str) -> int:
    """Bytes of tmpfs pages held by the files under `root`, each file counted once: a version's
    directory renamed into the file pool (or back) while we walk is met twice."""
    seen: dict[tuple[int, int], int] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted while we walk
                st = os.stat(os.path.join(dirpath, name))
                seen[st.st_dev, st.st_ino] = st.st_blocks * 512
    return sum(seen.values())


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("shared_memory", [False, None], ids=["grpc", "shm"])
def test_peak_memory_holding_n_and_receiving_one_more(
    servers: list[Server], shared_memory: bool | None
) -> None:
    """The server's peak memory over its idle RSS stays under (N + 1) x version x 1.1: its RSS
    plus its chunk files on /dev/shm (tmpfs pages RSS does not show), sampled every 10 ms."""
    n = 2
    servers.append(Server("--max-versions", str(n)))
    server = servers[0]
    rng = np.random.default_rng(0)
    mib = 1 << 20
    # 256 MiB per version: one 64 MiB "embedding" and twelve 16 MiB matrices, float32. (The
    # server's fixed overhead, ~50 MiB of reused buffers, is 1.18x for 96 MiB versions.)
    version = {"embed": rng.standard_normal(16 * mib, dtype=np.float32).reshape(-1, 1024)}
    for i in range(12):
        version[f"layers/{i}/w"] = rng.standard_normal(4 * mib, dtype=np.float32).reshape(1024, -1)
    size = sum(a.nbytes for a in version.values())
    with ParamServerClient(server.address, token=TOKEN, shared_memory=shared_memory) as client:
        client.push(0, {"tiny": np.zeros(4)})  # warm up gRPC and TensorStore
        client.drop(0)
        idle = server.status("VmRSS")
        store = server.store()
        peaks = {"sum": 0, "files": 0}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.01):
                files = tree_bytes(store)
                peaks["sum"] = max(peaks["sum"], server.status("VmRSS") + files)
                peaks["files"] = max(peaks["files"], files)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for v in range(1, n + 2):  # holds N, then receives the (N+1)-th
                client.push(v, version)
        finally:
            done.set()
            sampler.join()
        assert client.versions() == [2, 3]
        assert client.last_transport == ("grpc" if shared_memory is False else "shm")
    sampled = peaks["sum"] - idle
    upper = server.status("VmHWM") - idle + peaks["files"]
    bound = (n + 1) * size * 1.1
    print(
        f"\npeak server memory over idle ({'grpc' if shared_memory is False else 'shm'}), RSS + "
        f"chunk files: {sampled / mib:.0f} MiB sampled, at most {upper / mib:.0f} MiB (peak RSS "
        f"+ peak files) for N={n} versions of {size / mib:.0f} MiB receiving one more; bound "
        f"(N+1) x size x 1.1 = {bound / mib:.0f} MiB ({sampled / bound:.2f} of it)"
    )
    assert peaks["files"] >= n * size  # the files are where the versions are
    assert sampled < bound
