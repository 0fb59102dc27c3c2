"""The device's peaks: HBM bandwidth and bf16 dense matmul throughput, from the vendor's table
when JAX names a device it has, else measured (and the result says which)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Spec:
    name: str  # the part the numbers are for
    bandwidth: float  # HBM bandwidth, bytes/s
    bf16_flops: float  # dense bf16 tensor-core throughput (no sparsity), FLOP/s


# NVIDIA's datasheet figures. JAX's device_kind: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100
# PCIe", "NVIDIA H100 NVL", "NVIDIA H200". A GH200 (its name holds "H200") is not an H200.
H100_SXM = Spec("H100 SXM", 3.35e12, 989e12)
H100_PCIE = Spec("H100 PCIe", 2.0e12, 756e12)
H100_NVL = Spec("H100 NVL", 3.9e12, 835e12)
H200 = Spec("H200", 4.8e12, 989e12)


def spec_for(device_kind: str) -> Spec | None:
    kind = device_kind.upper()
    if "GH200" in kind:
        return None
    if "H200" in kind:
        return H200
    if "H100" in kind:
        if "PCIE" in kind:
            return H100_PCIE
        if "NVL" in kind:
            return H100_NVL
        return H100_SXM
    return None


@dataclass(frozen=True)
class Peaks:
    device_kind: str  # what JAX calls the device
    platform: str  # gpu, cpu, tpu
    bandwidth: float  # bytes/s the roofline divides by
    bandwidth_source: str  # "spec H100 SXM" or "measured: ..."
    flops: float  # FLOP/s the MFU divides by
    flops_source: str
    measured_copy: float  # bytes/s of a large copy (read + write): on device, or memcpy on a CPU
    measured_bf16: float  # FLOP/s of a bf16 matmul
    measured_f32: float  # FLOP/s of an f32 matmul

    def as_dict(self) -> dict:
        return asdict(self)


def _best_seconds(fn: Callable[[], jax.Array], repeats: int) -> float:
    fn().block_until_ready()  # compiles
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn().block_until_ready()
        times.append(time.perf_counter() - t0)
    return min(times)


def copy_bandwidth(n_bytes: int, repeats: int = 5) -> float:
    """Bytes/s of x + 1 over an f32 array of `n_bytes`: it reads and writes every byte once."""
    x = jnp.zeros(n_bytes // 4, jnp.float32)
    bump = jax.jit(lambda a: a + 1)
    return 2 * n_bytes / _best_seconds(lambda: bump(x), repeats)


def memcpy_bandwidth(n_bytes: int, repeats: int = 5) -> float:
    """Bytes/s of numpy copying `n_bytes` on the host (reads and writes each byte once): a CPU's
    memory bandwidth, which XLA's single-threaded elementwise loops do not reach."""
    src = np.ones(n_bytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 2 * n_bytes / min(times)


def matmul_flops(n: int, dtype: jnp.dtype, repeats: int = 5) -> float:
    """FLOP/s of one n x n x n matmul in `dtype` (accumulated as XLA chooses)."""
    a = jnp.ones((n, n), dtype)
    mm = jax.jit(lambda x: x @ x)
    return 2 * n**3 / _best_seconds(lambda: mm(a), repeats)


def measure(small: bool) -> Peaks:
    device = jax.devices()[0]
    on_cpu = device.platform == "cpu"
    copy_mib = 256 if on_cpu or small else 2048
    mm_n = 1024 if on_cpu else 8192
    copy = memcpy_bandwidth(copy_mib << 20) if on_cpu else copy_bandwidth(copy_mib << 20)
    how = "host memcpy (numpy)" if on_cpu else "on-device copy"
    bf16 = matmul_flops(mm_n, jnp.bfloat16)
    f32 = matmul_flops(mm_n, jnp.float32)
    spec = spec_for(device.device_kind)
    if spec is not None:
        bw, bw_src = spec.bandwidth, f"spec {spec.name}"
        fl, fl_src = spec.bf16_flops, f"spec {spec.name}, dense bf16"
    else:
        bw, bw_src = copy, f"measured: {copy_mib} MiB {how} (no spec for this device)"
        fl = max(bf16, f32)
        which = "bf16" if bf16 >= f32 else "f32"
        fl_src = f"measured: {mm_n}^3 {which} matmul, the faster of bf16/f32 (no spec)"
    return Peaks(
        device_kind=device.device_kind,
        platform=device.platform,
        bandwidth=bw,
        bandwidth_source=bw_src,
        flops=fl,
        flops_source=fl_src,
        measured_copy=copy,
        measured_bf16=bf16,
        measured_f32=f32,
    )
