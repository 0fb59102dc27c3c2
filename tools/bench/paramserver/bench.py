"""Moving one weight version: rlx-paramserver against memcpy and an Orbax disk round trip.

    uv run python tools/bench/paramserver/bench.py [--layers 24] [--repeats 2]

The tensors have the shapes of Qwen2-0.5B (vocab 151936, hidden 896, 24 layers, MLP 4864, 14
heads, 2 KV heads, tied embeddings) in bfloat16, ~0.99 GB, with the JAX [in, out] layout and the
tensor-parallel shard axes (q/k/v/gate/up on the output axis, o/down on the input axis, the
embedding on the vocabulary axis). The server runs in its own process (`rlx-paramserver
--max-versions 2`). Timed in the same run:

- memcpy: `np.copyto` of every tensor into preallocated arrays (the physical limit);
- paramserver push+commit and pull, over gRPC streaming and over the same-host shared-memory
  path (`pull()`: checksum-verified read-only arrays, views of the server's chunk files where
  the layout allows; `pull(out=)`: copied into preallocated arrays). A pull is timed from the
  call to its return; the arrays are released after the clock stops (as memcpy's are never
  freed);
- Orbax: `PyTreeCheckpointer` save + restore of the same tree through a local directory (what
  RL systems that move weights through checkpoints do).

Also reported: the server's peak memory while it holds 2 versions and receives a third, against
the (N + 1) x version x 1.1 bound: its RSS plus its chunk files on /dev/shm (tmpfs pages, which
RSS does not show), sampled every 10 ms, and, as an upper bound, its peak RSS (VmHWM) over idle
plus the peak of its files. Best of `--repeats` for each timing.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from rlx_core.clients import LifecycleClient, ParamServerClient

TOKEN = "bench-paramserver-token-0123456789"
VOCAB, HIDDEN, MLP, HEADS, KV_HEADS, HEAD_DIM = 151936, 896, 4864, 14, 2, 64


def qwen2_05b(layers: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Random bf16 tensors with Qwen2-0.5B's shapes, and each one's shard axis."""
    rng = np.random.default_rng(0)
    shapes: dict[str, tuple[tuple[int, ...], int]] = {"embed": ((VOCAB, HIDDEN), 0)}
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(layers):
        p = f"layers/{i}"
        shapes |= {
            f"{p}/attn/q/kernel": ((HIDDEN, q), 1),
            f"{p}/attn/q/bias": ((q,), 0),
            f"{p}/attn/k/kernel": ((HIDDEN, kv), 1),
            f"{p}/attn/k/bias": ((kv,), 0),
            f"{p}/attn/v/kernel": ((HIDDEN, kv), 1),
            f"{p}/attn/v/bias": ((kv,), 0),
            f"{p}/attn/o/kernel": ((q, HIDDEN), 0),
            f"{p}/mlp/gate/kernel": ((HIDDEN, MLP), 1),
            f"{p}/mlp/up/kernel": ((HIDDEN, MLP), 1),
            f"{p}/mlp/down/kernel": ((MLP, HIDDEN), 0),
            f"{p}/input_norm/scale": ((HIDDEN,), 0),
            f"{p}/post_attn_norm/scale": ((HIDDEN,), 0),
        }
    shapes["final_norm/scale"] = ((HIDDEN,), 0)
    tensors, axes = {}, {}
    for name, (shape, axis) in shapes.items():
        # random bits, not random normals: same bytes-moving cost, far faster to make
        bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16) & 0xBFFF  # no NaN/inf
        tensors[name] = bits.view(ml_dtypes.bfloat16)
        axes[name] = axis
    return tensors, axes


def best(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def rss(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def tree_bytes(root: str) -> int:
    """Bytes of tmpfs pages held by the files under `root` (files vanish while we walk)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total


class MemorySampler:
    """Samples a server's RSS + its chunk files every 10 ms and keeps the peaks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        roots = glob.glob(f"/dev/shm/rlx-psstore-{pid}-*")
        self.root = roots[0] if roots else ""
        self.peak_sum = self.peak_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int]:
        files = tree_bytes(self.root) if self.root else 0
        return rss(self.pid, "VmRSS"), files

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            resident, files = self.sample()
            self.peak_sum = max(self.peak_sum, resident + files)
            self.peak_files = max(self.peak_files, files)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def time_memcpy(tensors: dict[str, np.ndarray], repeats: int) -> float:
    dst = {n: np.empty_like(a) for n, a in tensors.items()}

    def copy() -> None:
        for n, a in tensors.items():
            np.copyto(dst[n], a)

    return best(repeats + 3, copy)


def start_server() -> tuple[subprocess.Popen[str], str]:
    """A real `rlx-paramserver` process keeping 2 versions, and its address once ready."""
    binary = str(Path(sys.executable).parent / "rlx-paramserver")
    server = subprocess.Popen(
        [binary, "--port", "0", "--max-versions", "2", "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLX_TOKEN": TOKEN},
    )
    assert server.stdout is not None
    address = server.stdout.readline().strip()
    LifecycleClient(address, token=TOKEN).wait_ready(timeout=60)
    return server, address


def time_paramserver(
    tensors: dict[str, np.ndarray], axes: dict[str, int], repeats: int
) -> tuple[list[tuple[str, float]], dict[str, int]]:
    """Timings of push+commit and pull on both transports, and the server's peak memory."""
    rows = []
    server, address = start_server()
    try:
        grpc_client = ParamServerClient(address, token=TOKEN, shared_memory=False, timeout=600)
        shm_client = ParamServerClient(address, token=TOKEN, shared_memory=True, timeout=600)
        grpc_client.push(0, {"warmup": np.zeros(8)})
        grpc_client.drop(0)
        idle = rss(server.pid, "VmRSS")
        version = iter(range(1, 1000))
        pushed: list[int] = []

        def push(client: ParamServerClient) -> None:
            v = next(version)
            client.push(v, tensors, shard_axes=axes)
            pushed.append(v)

        with MemorySampler(server.pid) as sampler:
            # a fresh server has no pages to reuse: the first 3 pushes take new ones (2 versions
            # held + 1 received); from the 4th on a push gets the files of a deleted version
            rows.append(("push+commit, shm, new pages", best(1, lambda: push(shm_client))))
            push(shm_client)
            push(shm_client)
            rows.append(("push+commit, shm (steady)", best(repeats + 3, lambda: push(shm_client))))
            rows.append(("push+commit, gRPC (steady)", best(repeats, lambda: push(grpc_client))))
        memory = {
            "idle_rss": idle,
            "peak_sum": sampler.peak_sum,
            "peak_files": sampler.peak_files,
            "hwm_over_idle": rss(server.pid, "VmHWM") - idle,  # held 2 versions, received more
        }
        latest = pushed[-1]

        def time_pull(client: ParamServerClient) -> float:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                got_version, got = client.pull(latest)
                times.append(time.perf_counter() - start)
                assert got_version == latest and len(got) == len(tensors)
                del got  # freed (unmapped) after the clock stops
            return min(times)

        rows.append(("pull, gRPC", time_pull(grpc_client)))
        rows.append(("pull, shm", time_pull(shm_client)))
        into = {n: np.empty_like(a) for n, a in tensors.items()}

        def pull_into() -> None:
            got_version, got = shm_client.pull(latest, out=into)
            assert got_version == latest and got["embed"] is into["embed"]

        pull_into()  # first touch of the reused segment and of `into`
        rows.append(("pull into arrays, shm", best(repeats, pull_into)))
        _, check = shm_client.pull(latest)
        assert all(check[n].tobytes() == a.tobytes() for n, a in tensors.items())
    finally:
        server.terminate()
        server.wait(60)
    return rows, memory


def time_orbax(tensors: dict[str, np.ndarray], repeats: int) -> tuple[float, float]:
    import orbax.checkpoint as ocp

    ckpt = ocp.PyTreeCheckpointer()
    tree = {n.replace("/", "."): a for n, a in tensors.items()}
    root = Path(tempfile.mkdtemp(prefix="rlx-bench-orbax-"))
    try:
        n = iter(range(1000))
        save_s = best(repeats, lambda: ckpt.save(root / f"c{next(n)}", tree))
        restore_s = best(repeats, lambda: ckpt.restore(root / "c0"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return save_s, restore_s


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    tensors, axes = qwen2_05b(args.layers)
    size = sum(a.nbytes for a in tensors.values())
    gb = size / 1e9
    print(f"version: {len(tensors)} bf16 tensors, {size / 2**30:.3f} GiB ({gb:.3f} GB)")
    memcpy = time_memcpy(tensors, args.repeats)
    rows = [("numpy memcpy (baseline)", memcpy)]
    ps_rows, memory = time_paramserver(tensors, axes, args.repeats)
    rows += ps_rows
    save_s, restore_s = time_orbax(tensors, args.repeats)
    orbax_rt = save_s + restore_s
    rows += [
        ("orbax save (local disk)", save_s),
        ("orbax restore (local disk)", restore_s),
        ("orbax save + restore round trip", orbax_rt),
    ]
    header = f"{'what':<34} {'seconds':>8} {'GB/s':>6} {'x memcpy':>8} {'x faster than orbax'}"
    print("\n" + header)
    for what, seconds in rows:
        print(
            f"{what:<34} {seconds:>8.3f} {gb / seconds:>6.2f} {memcpy / seconds:>8.3f} "
            f"{orbax_rt / seconds:>19.2f}"
        )
    for label in ("push+commit, shm (steady)", "pull, shm", "pull into arrays, shm"):
        seconds = dict(rows)[label]
        vs_memcpy, vs_orbax = memcpy / seconds, orbax_rt / seconds
        print(f"\nparamserver {label}:")
        print(f"  goal >= 0.25x memcpy: {vs_memcpy:.3f}x ", end="")
        print("(met)" if vs_memcpy >= 0.25 else "(NOT met)")
        print(
            f"  goal >= 5x faster than the Orbax save+restore round trip: {vs_orbax:.1f}x ", end=""
        )
        print("(met)" if vs_orbax >= 5 else "(NOT met)")
    bound = 3 * size * 1.1
    mib = 2**20
    sampled = memory["peak_sum"] - memory["idle_rss"]
    upper = memory["hwm_over_idle"] + memory["peak_files"]
    print(
        f"\nserver memory holding 2 versions and receiving more (bound (N+1) x version x 1.1 = "
        f"{bound / mib:.0f} MiB):\n"
        f"  peak of RSS + chunk files on /dev/shm, sampled, over idle RSS: {sampled / mib:.0f} MiB "
        f"({sampled / bound:.2f} of the bound)\n"
        f"  upper bound, peak RSS over idle ({memory['hwm_over_idle'] / mib:.0f} MiB) + peak of "
        f"the files ({memory['peak_files'] / mib:.0f} MiB): {upper / mib:.0f} MiB "
        f"({upper / bound:.2f} of the bound)"
    )


if __name__ == "__main__":
    main()
