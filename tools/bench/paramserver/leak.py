"""Does memory come back? Repeated identical push/pull rounds against one `rlx-paramserver`.

    uv run python tools/bench/paramserver/leak.py [--rounds 6] [--mib 128] [--transport both]

Each round pushes a new version of `--mib` MiB (float32: one "embedding" of a quarter of it and
six matrices sharing the rest, shard axes as a model's) and pulls it back whole, with
`--max-versions 2`, so from the third round on every push evicts the oldest version. Then the
pushes that fail: one whose stream the client cancels after half its bytes (a trainer preempted
mid-push), and one the server refuses (the version exists), on the transport measured. After each
round it prints, for the server process: its RSS, the bytes of its chunk files on /dev/shm, the
peak of the two summed while the round ran (sampled every 10 ms), its open file descriptors and
mappings; for this process (the client): its RSS, and the `rlx-ps-*` segments left on /dev/shm.
In steady state (round 3 on) every figure should repeat round after round; a figure that grows
by about a version per round is a leak.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from rlx_core.clients import ParamServerClient
from rlx_core.errors import AlreadyExists
from rlx_core.proto.paramserver.v1 import paramserver_pb2 as pb
from rlx_core.proto.paramserver.v1 import paramserver_pb2_grpc as pb_grpc
from rlx_core.rpc import connect, tensor_to_chunks

sys.path.insert(0, str(Path(__file__).parent))
# the push/pull bench's server, token and /proc and tmpfs readings
from bench import TOKEN, rss, start_server, tree_bytes

MIB = 1 << 20


def shm_used() -> int:
    """Bytes in use on /dev/shm: every tmpfs page, including files unlinked but still mapped."""
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def version_tensors(mib: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    rng = np.random.default_rng(seed)
    quarter = mib * MIB // 4 // 4  # float32 elements in a quarter of the version
    tensors = {"embed": rng.standard_normal(quarter, dtype=np.float32).reshape(-1, 1024)}
    axes = {"embed": 0}
    for i in range(6):
        tensors[f"layers/{i}/w"] = rng.standard_normal(quarter // 2, dtype=np.float32).reshape(
            1024, -1
        )
        axes[f"layers/{i}/w"] = i % 2  # half split on the output axis, as q/k/v/up are
    return tensors, axes


def cut_push(
    address: str, version: int, tensors: dict[str, np.ndarray], axes: dict[str, int]
) -> None:
    """A gRPC push cancelled by its client once half its bytes are sent."""
    header = pb.PushHeader(
        version=version,
        tensors=[
            pb.TensorSpec(name=n, dtype="float32", shape=list(a.shape), shard_axis=axes[n])
            for n, a in tensors.items()
        ],
    )
    half = sum(a.nbytes for a in tensors.values()) // 2
    cut, stop = threading.Event(), threading.Event()

    def requests() -> object:
        yield pb.PushRequest(header=header)
        sent = 0
        for name, array in tensors.items():
            for chunk in tensor_to_chunks(name, array):
                yield pb.PushRequest(chunk=chunk)
                sent += len(chunk.data)
                if sent >= half:
                    cut.set()
                    stop.wait(600)  # until cancelled
                    return

    channel = connect(address, token=TOKEN)
    try:
        call = pb_grpc.ParamServerStub(channel).Push.future(requests(), timeout=600)
        cut.wait(600)
        time.sleep(0.5)  # let the server store what it was sent
        call.cancel()
        stop.set()
        with contextlib.suppress(grpc.FutureCancelledError, grpc.RpcError):
            call.result()
        time.sleep(0.5)  # and notice the cancel
    finally:
        channel.close()


class Sampler:
    """The peak of the server's RSS + chunk files while a round runs."""

    def __init__(self, pid: int, root: str) -> None:
        self.pid, self.root, self.peak = pid, root, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                now = rss(self.pid, "VmRSS") + tree_bytes(self.root)
                self.peak = max(self.peak, now)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(transport: str, rounds: int, mib: int) -> None:
    server, address = start_server()
    try:
        (root,) = glob.glob(f"/dev/shm/rlx-psstore-{server.pid}-*")
        shm = None if transport == "shm" else False
        client = ParamServerClient(address, token=TOKEN, shared_memory=shm, timeout=600)
        tensors, axes = version_tensors(mib, 0)
        print(
            f"\n{transport}: {rounds} rounds, push + pull of a {mib} MiB version each, "
            f"max_versions 2 (server pid {server.pid})"
        )
        print(
            f"{'round':>5} {'server RSS':>11} {'store':>9} {'peak R+S':>9} {'fds':>5} "
            f"{'maps':>6} {'client RSS':>11} {'segments':>8} {'shm used':>9}"
        )
        for r in range(1, rounds + 1):
            with Sampler(server.pid, root) as sampler:
                client.push(r, tensors, shard_axes=axes)
                _, pulled = client.pull(r)
                assert all(np.array_equal(pulled[n], tensors[n]) for n in tensors)
                del pulled
                cut_push(address, 1000 + r, tensors, axes)
                with contextlib.suppress(AlreadyExists):
                    client.push(r, tensors, shard_axes=axes)  # refused: the version exists
            fds = len(os.listdir(f"/proc/{server.pid}/fd"))
            maps = len(Path(f"/proc/{server.pid}/maps").read_text().splitlines())
            segments = len(glob.glob("/dev/shm/rlx-ps-*"))
            print(
                f"{r:>5} {rss(server.pid, 'VmRSS') / MIB:>8.0f} MiB "
                f"{tree_bytes(root) / MIB:>5.0f} MiB {sampler.peak / MIB:>5.0f} MiB {fds:>5} "
                f"{maps:>6} {rss(os.getpid(), 'VmRSS') / MIB:>8.0f} MiB {segments:>8} "
                f"{shm_used() / MIB:>5.0f} MiB"
            )
        client.close()
    finally:
        server.terminate()
        server.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--transport", choices=["grpc", "shm", "both"], default="both")
    args = parser.parse_args()
    print(f"uptime: {os.getloadavg()}")
    for transport in ["grpc", "shm"] if args.transport == "both" else [args.transport]:
        run(transport, args.rounds, args.mib)


if __name__ == "__main__":
    main()
