"""Moving one weight version: rlx-paramserver against memcpy and an Orbax disk round trip.

    uv run python tools/bench/paramserver/bench.py [--layout rlx|per-layer] [--layers 24]
        [--repeats 2]

The version has the shapes of Qwen2-0.5B (vocab 151936, hidden 896, 24 layers, MLP 4864, 14
heads, 2 KV heads, tied embeddings) in bfloat16, ~0.99 GB, random bits. `--layout rlx` (the
default) is what rlx's trainer pushes: its flat tensors (`rlx_model.param_shapes`: 14 of them,
the layers stacked, [L, in, out]) chunked along the axes its push names
(`rlx_model.sharding.chunk_axes`: the axis a tensor-parallel inference worker splits).
`--layout per-layer` is 290 tensors, one per layer and weight, as an HF checkpoint names them
(what this bench timed before; the figures in the paramserver README's first table). The server
runs in its own process (`rlx-paramserver --max-versions 2`). Timed in the same run:

- memcpy: `np.copyto` of every tensor into preallocated arrays (the physical limit);
- paramserver push+commit and pull, over gRPC streaming and over the same-host shared-memory
  path (`pull()`: checksum-verified read-only arrays, views of the server's chunk files where
  the layout allows; `pull(out=)`: copied into preallocated arrays). A pull is timed from the
  call to its return; the arrays are released after the clock stops (as memcpy's are never
  freed);
- a tensor-parallel pull: what one of two inference processes splitting the model 2 ways
  pulls (`rlx_inference.mesh.pull_boxes`: its half of every tensor the tensor axis splits, the
  norms whole), with the bytes of the chunks the server reads for it;
- Orbax: `PyTreeCheckpointer` save + restore of the same tree through a local directory (what
  RL systems that move weights through checkpoints do).

Also reported: the server's peak memory while it holds 2 versions and receives a third, against
the (N + 1) x version x 1.1 bound: its RSS without shared-memory pages plus its chunk files on
/dev/shm (tmpfs pages, which RSS shows only while mapped), sampled every 10 ms, and, as an upper
bound that counts the files it maps twice, its peak RSS (VmHWM) over idle plus the peak of its
files. Best of `--repeats` for each timing.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np

from rlx_core.clients import LifecycleClient, ParamServerClient
from rlx_core.clients.paramserver import TensorSpec

TOKEN = secrets.token_hex(16)  # this run's server and clients only
VOCAB, HIDDEN, MLP, HEADS, KV_HEADS, HEAD_DIM = 151936, 896, 4864, 14, 2, 64
Boxes = dict[str, tuple[list[int], list[int]]]


def random_bf16(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    # random bits, not random normals: same bytes-moving cost, far faster to make
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16) & 0xBFFF  # no NaN/inf
    return bits.view(ml_dtypes.bfloat16)


def qwen2_05b_rlx(layers: int) -> tuple[dict[str, np.ndarray], dict[str, int], Boxes]:
    """Random bf16 tensors in rlx's own flat layout of Qwen2-0.5B, the axes the trainer's push
    names, and the boxes one of two tensor-parallel processes pulls."""
    from rlx_model import param_shapes, tiny_config
    from rlx_model.families import get_family
    from rlx_model.sharding import chunk_axes

    cfg = replace(
        tiny_config(),
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_layers=layers,
        num_heads=HEADS,
        num_kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        intermediate_size=MLP,
        tie_word_embeddings=True,
    )
    rng = np.random.default_rng(0)
    tensors = {name: random_bf16(shape, rng) for name, shape in param_shapes(cfg).items()}
    axes = chunk_axes(cfg)
    specs = get_family(cfg.family).specs_for(cfg)
    boxes = {}
    for name, a in tensors.items():  # process 0 of a tensor axis of 2: the first half
        if "tensor" in specs[name]:
            axis = specs[name].index("tensor")
            stop = list(a.shape)
            stop[axis] //= 2
            boxes[name] = ([0] * a.ndim, stop)
    return tensors, axes, boxes


def qwen2_05b(layers: int) -> tuple[dict[str, np.ndarray], dict[str, int], Boxes]:
    """Random bf16 tensors with Qwen2-0.5B's shapes, one per layer and weight as an HF
    checkpoint names them, each one's shard axis, and the tensor-parallel half's boxes."""
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
    tensors, axes, boxes = {}, {}, {}
    for name, (shape, axis) in shapes.items():
        tensors[name] = random_bf16(shape, rng)
        axes[name] = axis
        if not name.endswith("/scale"):  # every tensor but the norms is split
            stop = list(shape)
            stop[axis] //= 2
            boxes[name] = ([0] * len(shape), stop)
    return tensors, axes, boxes


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
    """Bytes of tmpfs pages held by the files under `root`, each file once (files vanish while
    we walk; a version's directory renamed into the file pool, or back, is met twice)."""
    seen: dict[tuple[int, int], int] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(os.path.join(dirpath, name))
                seen[st.st_dev, st.st_ino] = st.st_blocks * 512
    return sum(seen.values())


def private_rss(pid: int) -> int:
    """RSS without its shared-memory pages (RssShmem): the server's only ones are the chunk
    files it maps while it writes a tensor received over gRPC, which `tree_bytes` counts."""
    return rss(pid, "RssAnon") + rss(pid, "RssFile")


class MemorySampler:
    """Samples a server's RSS (without the chunk files it maps: `private_rss`) + its chunk files
    every 10 ms and keeps the peaks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        roots = glob.glob(f"/dev/shm/rlx-psstore-{pid}-*")
        self.root = roots[0] if roots else ""
        self.peak_sum = self.peak_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int]:
        files = tree_bytes(self.root) if self.root else 0
        return private_rss(self.pid), files

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
    tensors: dict[str, np.ndarray], axes: dict[str, int], boxes: Boxes, repeats: int
) -> tuple[list[tuple[str, float]], dict[str, int]]:
    """Timings of push+commit and pull on both transports, whole and a tensor-parallel half;
    the server's peak memory, and the bytes of the chunks the half's pull reads."""
    rows = []
    server, address = start_server()
    try:
        grpc_client = ParamServerClient(address, token=TOKEN, shared_memory=False, timeout=600)
        shm_client = ParamServerClient(address, token=TOKEN, shared_memory=True, timeout=600)
        grpc_client.push(0, {"warmup": np.zeros(8)})
        grpc_client.drop(0)
        idle = private_rss(server.pid)
        version = iter(range(1, 1000))
        pushed: list[int] = []

        def push(client: ParamServerClient) -> None:
            v = next(version)
            client.push(v, tensors, shard_axes=axes)
            pushed.append(v)

        # a fresh server has no pages to reuse: the first 3 pushes take new ones (2 versions
        # held + 1 received); from the 4th on a push gets the files of a deleted version
        rows.append(("push+commit, shm, new pages", best(1, lambda: push(shm_client))))
        push(shm_client)
        push(shm_client)
        rows.append(("push+commit, shm (steady)", best(repeats + 3, lambda: push(shm_client))))
        rows.append(("push+commit, gRPC (steady)", best(repeats, lambda: push(grpc_client))))
        # memory over more pushes of both kinds, apart: the sampler's walks of the store every
        # 10 ms take CPU the timed pushes would share (2 cores)
        with MemorySampler(server.pid) as sampler:
            for client in (shm_client, grpc_client, shm_client):
                push(client)
        memory = {
            "idle_rss": idle,
            "peak_sum": sampler.peak_sum,
            "peak_files": sampler.peak_files,
            "hwm_over_idle": rss(server.pid, "VmHWM") - idle,  # held 2 versions, received more
        }
        pull_rows, reads = time_pulls(grpc_client, shm_client, pushed[-1], tensors, boxes, repeats)
        rows += pull_rows
        memory |= reads
    finally:
        server.terminate()
        server.wait(60)
    return rows, memory


def time_pulls(
    grpc_client: ParamServerClient,
    shm_client: ParamServerClient,
    latest: int,
    tensors: dict[str, np.ndarray],
    boxes: Boxes,
    repeats: int,
) -> tuple[list[tuple[str, float]], dict[str, int]]:
    """Pulls of version `latest`, whole and the tensor-parallel half, on both transports; the
    half's bytes and those of the chunks the server reads for it."""
    rows: list[tuple[str, float]] = []

    def time_pull(client: ParamServerClient, slices: Boxes | None = None) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            got_version, got = client.pull(latest, slices=slices)
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
    del check

    rows.append(("pull TP half, gRPC", time_pull(grpc_client, boxes)))
    rows.append(("pull TP half, shm", time_pull(shm_client, boxes)))
    _, half = shm_client.pull(latest, slices=boxes)
    for name, (start, stop) in boxes.items():
        box = tuple(slice(a, b) for a, b in zip(start, stop, strict=True))
        assert half[name].tobytes() == tensors[name][box].tobytes(), name
    half_bytes = sum(a.nbytes for a in half.values())
    del half
    _, specs = shm_client.manifest(latest)
    read = sum(chunk_bytes(spec, boxes.get(spec.name)) for spec in specs)
    return rows, {"half_bytes": half_bytes, "half_chunk_bytes": read}


def chunk_bytes(spec: TensorSpec, box: tuple[list[int], list[int]] | None) -> int:
    """Bytes of the storage chunks of tensor `spec` that `box` (None: all of it) overlaps."""
    if box is None:
        box = ([0] * len(spec.shape), list(spec.shape))
    count = math.prod(
        (b - 1) // c - a // c + 1 for a, b, c in zip(box[0], box[1], spec.chunk_shape, strict=True)
    )
    return count * math.prod(spec.chunk_shape) * spec.dtype.itemsize


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
    parser.add_argument("--layout", choices=("rlx", "per-layer"), default="rlx")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    make = qwen2_05b_rlx if args.layout == "rlx" else qwen2_05b
    tensors, axes, boxes = make(args.layers)
    size = sum(a.nbytes for a in tensors.values())
    gb = size / 1e9
    print(
        f"version ({args.layout} layout): {len(tensors)} bf16 tensors, {size / 2**30:.3f} GiB "
        f"({gb:.3f} GB)"
    )
    memcpy = time_memcpy(tensors, args.repeats)
    rows = [("numpy memcpy (baseline)", memcpy)]
    ps_rows, memory = time_paramserver(tensors, axes, boxes, args.repeats)
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
    half, read = memory["half_bytes"], memory["half_chunk_bytes"]
    print(
        f"\ntensor-parallel half (one of 2 processes): {half / 1e9:.3f} GB of the version's "
        f"{gb:.3f} GB ({half / size:.2f}); the chunks the server reads for it: {read / 1e9:.3f} GB "
        f"({read / size:.2f})"
    )
    bound = 3 * size * 1.1
    mib = 2**20
    sampled = memory["peak_sum"] - memory["idle_rss"]
    upper = memory["hwm_over_idle"] + memory["peak_files"]
    print(
        f"\nserver memory holding 2 versions and receiving more (bound (N+1) x version x 1.1 = "
        f"{bound / mib:.0f} MiB):\n"
        f"  peak of RSS (no shared pages) + chunk files on /dev/shm, sampled, over idle: "
        f"{sampled / mib:.0f} MiB ({sampled / bound:.2f} of the bound)\n"
        f"  upper bound (counts the files it maps twice), peak RSS over idle "
        f"({memory['hwm_over_idle'] / mib:.0f} MiB) + peak of "
        f"the files ({memory['peak_files'] / mib:.0f} MiB): {upper / mib:.0f} MiB "
        f"({upper / bound:.2f} of the bound)"
    )


if __name__ == "__main__":
    main()
