"""Sandbox overhead and throughput of rlx-verifier on small Python programs.

2000 (program, input) pairs: 20 small stdin/stdout Python programs x 100 inputs each. One run:

1. per-run time, interleaved pair by pair so machine load hits both alike: the program run bare
   (`python3 -I -S -B prog` as a subprocess, no sandbox, no limits) against the same program in
   the verifier's sandbox (`Verifier._execute`: bubblewrap, setpriv, prlimit, files, wait4);
   overhead = sandboxed - bare, mean and median;
2. where the time goes, on 200 pairs: bare, + prlimit, + bubblewrap (no uid drop), the full
   command line, and the full `Sandbox.run` (its Python-side work included);
3. throughput over all pairs with 1 and 2 workers (threads, each run its own sandbox), bare and
   sandboxed.

Prints `uptime` before and after: other jobs share this machine.

    uv run python tools/bench/verifier/bench.py [--pairs 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig
from rlx_verifier.languages import PYTHON

PROGRAMS = [
    "print(sum(map(int, input().split())))",
    "a, b = list(map(int, input().split()))[:2]\nprint(a * b)",
    "n = int(input().split()[0])\nprint(n * (n + 1) // 2)",
    "xs = sorted(map(int, input().split()))\nprint(*xs)",
    "xs = list(map(int, input().split()))\nprint(max(xs) - min(xs))",
    "s = input()\nprint(s[::-1])",
    "import sys\nprint(len(sys.stdin.read().split()))",
    "xs = list(map(int, input().split()))\nprint(sum(x * x for x in xs))",
    "n = abs(int(input().split()[0])) % 30\na, b = 0, 1\n"
    "for _ in range(n):\n    a, b = b, a + b\nprint(a)",
    "xs = input().split()\nprint(' '.join(sorted(set(xs))))",
    "import math\nprint(math.gcd(*map(int, input().split()[:2])))",
    "xs = list(map(int, input().split()))\nprint(sum(1 for x in xs if x % 2 == 0))",
    "s = input().replace(' ', '')\nprint(s.count('1'))",
    "xs = list(map(int, input().split()))\nprint(xs.index(max(xs)))",
    "n = abs(int(input().split()[0])) % 1000 + 2\n"
    "print(all(n % d for d in range(2, int(n ** 0.5) + 1)))",
    "xs = list(map(int, input().split()))\nprint(round(sum(xs) / len(xs), 3))",
    "from collections import Counter\nprint(Counter(input().split()).most_common(1)[0][0])",
    "xs = list(map(int, input().split()))\nacc = 0\n"
    "for x in xs:\n    acc = (acc * 31 + x) % 1000003\nprint(acc)",
    "print(input().upper())",
    "xs = list(map(int, input().split()))\nprint(*[x for x in xs if x > 0] or [0])",
]


def inputs(k: int, count: int) -> list[bytes]:
    return [
        (
            " ".join(str((i * 7919 + j * 104729 + k) % 2001 - 1000) for j in range(2 + i % 9))
            + "\n"
        ).encode()
        for i in range(count)
    ]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def bare_run(path: str, data: bytes) -> float:
    start = time.perf_counter()
    subprocess.run([PYTHON, "-I", "-S", "-B", path], input=data, capture_output=True, check=True)
    return time.perf_counter() - start


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fmt_ms(values: list[float]) -> str:
    mean, median = statistics.mean(values) * 1e3, statistics.median(values) * 1e3
    return f"mean {mean:6.2f} ms  median {median:6.2f} ms"


def main() -> None:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=200, help="pairs for the breakdown")
    args = parser.parse_args()
    per = max(1, args.pairs // len(PROGRAMS))
    print(f"before: {uptime()}")
    verifier = Verifier(JudgeConfig(workers=2))
    lang = verifier.languages["python"]
    print(f"sandbox: {verifier.sandbox.mode}; {lang.version}; {os.cpu_count()} cores")
    host = tempfile.mkdtemp(prefix="rlx-bench-")
    builds: list[str] = []
    pairs: list[tuple[int, bytes]] = []
    for k, source in enumerate(PROGRAMS):
        build, ce = verifier._build(lang, source)
        assert ce is None
        builds.append(build)
        shutil.copy(os.path.join(build, "main.py"), os.path.join(host, f"p{k}.py"))
        pairs += [(k, data) for data in inputs(k, per)]
    limits = verifier._limits(lang, 2.0, 256)

    def sandboxed(pair: tuple[int, bytes]) -> float:
        k, data = pair
        start = time.perf_counter()
        r = verifier._execute(lang, builds[k], data, limits)
        elapsed = time.perf_counter() - start
        assert r.exit_code == 0, r.stderr
        return elapsed

    def bare(pair: tuple[int, bytes]) -> float:
        return bare_run(os.path.join(host, f"p{pair[0]}.py"), pair[1])

    # warm-up (page cache, bwrap binary)
    for pair in pairs[:20]:
        bare(pair), sandboxed(pair)

    # 1. interleaved per-run times
    b_times, s_times = [], []
    for pair in pairs:
        b_times.append(bare(pair))
        s_times.append(sandboxed(pair))
    overhead = [s - b for s, b in zip(s_times, b_times, strict=True)]
    print(f"\nper run, {len(pairs)} pairs, interleaved, 1 at a time")
    print(f"  bare (no sandbox)  {fmt_ms(b_times)}")
    print(f"  rlx sandbox        {fmt_ms(s_times)}")
    ratio = statistics.mean(s_times) / statistics.mean(b_times)
    print(f"  overhead           {fmt_ms(overhead)}   ratio {ratio:.2f}x")

    # 2. layers
    sb = verifier.sandbox
    sample = pairs[:: max(1, len(pairs) // args.layers)][: args.layers]
    prog = [PYTHON, "-I", "-S", "-B", "/prog/main.py"]
    scratch = tempfile.mkdtemp(dir=sb.scratch_root)
    r_fd, w_fd = os.pipe()
    uid = sb._uids.get()

    def command(kind: str, k: int) -> list[str]:
        host_prog = [PYTHON, "-I", "-S", "-B", os.path.join(host, f"p{k}.py")]
        if kind == "bare":
            return host_prog
        if kind == "prlimit":
            return sb._prlimit(limits) + host_prog
        full = sb._bwrap(limits, [(builds[k], "/prog")], [], "/tmp", {}, w_fd, uid)
        if kind == "bwrap":  # no setpriv, no prlimit
            cut = full.index("--info-fd")
            return [*full[:cut], "--", *prog]
        return full + sb._prlimit(limits) + prog

    layer_times: dict[str, list[float]] = {}
    for kind in ("bare", "prlimit", "bwrap", "bwrap+setpriv+prlimit"):
        layer_times[kind] = [
            timed(
                lambda kind=kind, k=k, data=data: subprocess.run(
                    command(kind, k), input=data, capture_output=True, check=True, pass_fds=(w_fd,)
                )
            )
            for k, data in sample
        ]
    layer_times["Sandbox.run (all)"] = [sandboxed(p) for p in sample]
    sb._uids.put(uid)
    os.close(r_fd)
    os.close(w_fd)
    shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.mean(layer_times["bare"])
    print(f"\nwhere the time goes, {len(sample)} pairs each (subprocess.run of the command line)")
    for kind, values in layer_times.items():
        extra = (statistics.mean(values) - base) * 1e3
        print(f"  {kind:24s} {fmt_ms(values)}   +{extra:5.2f} ms over bare")

    # 3. throughput
    print(f"\nthroughput over {len(pairs)} pairs")
    for workers in (1, 2):
        for name, fn in (("bare", bare), ("rlx sandbox", sandboxed)):
            with ThreadPoolExecutor(workers) as pool:
                start = time.perf_counter()
                list(pool.map(fn, pairs))
                wall = time.perf_counter() - start
            plural = "s" if workers > 1 else " "
            print(f"  {name:12s} {workers} worker{plural}  {len(pairs) / wall:7.1f} runs/s")
    for build in builds:
        shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(host, ignore_errors=True)
    verifier.close()
    mean_over = statistics.mean(overhead) * 1e3
    verdict = "met" if mean_over <= 10 else "NOT met"
    print(f"\noverhead per run {mean_over:.2f} ms (goal <= 10 ms): {verdict}")
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
