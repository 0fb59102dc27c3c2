"""Sandbox overhead and throughput of rlx-verifier on small Python programs.

2000 (program, input) pairs: 20 small stdin/stdout Python programs x 100 inputs each. One run:

1. per-run time, interleaved pair by pair so machine load hits all alike: the program run bare
   (`python3 -I -S -B prog` as a subprocess, no sandbox, no limits), the same program through
   the verifier's default fork-server runner (`Verifier._execute`: one long-lived bubblewrap per
   worker, a fresh PID/mount/IPC namespace, tmpfs, uid and rlimits per run), and through the
   per-run runner (a new bubblewrap + setpriv + prlimit per run, `sandbox_runner = "per-run"`);
   overhead = sandboxed - bare, mean and median;
2. where the time goes, on 200 pairs: the fork server's phases (from its own timestamps), and
   for the per-run runner: bare, + prlimit, + bubblewrap (no uid drop), the full command line,
   and the full `Sandbox.run` (its Python-side work included);
3. throughput over all pairs with 1 and 2 workers (threads), bare and both runners.

Prints `uptime` before and after: other jobs share this machine.

    uv run python tools/bench/verifier/bench.py [--pairs 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig
from rlx_verifier.languages import PYTHON
from rlx_verifier.sandbox import ForkServer, seccomp_fd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

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
    per_run = Verifier(JudgeConfig(workers=2, sandbox_runner="per-run"))
    lang = verifier.languages["python"]
    print(
        f"sandbox: {verifier.sandbox.mode} (compared with {per_run.sandbox.mode}); "
        f"{lang.version}; {os.cpu_count()} cores"
    )
    assert verifier.sandbox.runner == "forkserver", "the fork server needs root"
    host = tempfile.mkdtemp(prefix="rlx-bench-")
    builds: dict[str, list[str]] = {"fork": [], "per-run": []}
    pairs: list[tuple[int, bytes]] = []
    for k, source in enumerate(PROGRAMS):
        for name, v in (("fork", verifier), ("per-run", per_run)):
            build, ce = v._build(lang, source)
            assert ce is None
            builds[name].append(build)
        shutil.copy(os.path.join(builds["fork"][k], "main.py"), os.path.join(host, f"p{k}.py"))
        pairs += [(k, data) for data in inputs(k, per)]
    # A generous time limit: a load spike from other jobs must not turn a run into a TLE here.
    limits = verifier._limits(lang, 10.0, 256)

    def runner(v: Verifier, name: str) -> Callable[[tuple[int, bytes]], float]:
        def run(pair: tuple[int, bytes]) -> float:
            k, data = pair
            start = time.perf_counter()
            r = v._execute(lang, builds[name][k], data, limits)
            elapsed = time.perf_counter() - start
            assert r.exit_code == 0, (name, r.exit_code, r.signal, r.wall_timeout, r.stderr)
            return elapsed

        return run

    forked, old = runner(verifier, "fork"), runner(per_run, "per-run")

    def bare(pair: tuple[int, bytes]) -> float:
        return bare_run(os.path.join(host, f"p{pair[0]}.py"), pair[1])

    # warm-up (page cache, bwrap binary, the fork servers)
    for pair in pairs[:20]:
        bare(pair), forked(pair), old(pair)

    # 1. interleaved per-run times
    b_times, f_times, o_times = [], [], []
    for pair in pairs:
        b_times.append(bare(pair))
        f_times.append(forked(pair))
        o_times.append(old(pair))
    overhead = [s - b for s, b in zip(f_times, b_times, strict=True)]
    old_overhead = [s - b for s, b in zip(o_times, b_times, strict=True)]
    print(f"\nper run, {len(pairs)} pairs, interleaved, 1 at a time")
    print(f"  bare (no sandbox)       {fmt_ms(b_times)}")
    print(f"  rlx sandbox, fork srv   {fmt_ms(f_times)}")
    print(f"  rlx sandbox, per-run    {fmt_ms(o_times)}")
    for name, over, times in (
        ("fork server", overhead, f_times),
        ("per-run", old_overhead, o_times),
    ):
        ratio = statistics.mean(times) / statistics.mean(b_times)
        print(f"  overhead, {name:12s}  {fmt_ms(over)}   ratio {ratio:.2f}x")

    # 2. where the time goes
    sample = pairs[:: max(1, len(pairs) // args.layers)][: args.layers]
    phases: list[dict[str, float]] = []
    call = ForkServer.call

    def traced(
        self: ForkServer, request: dict[str, object], fds: list[int], *rest: object
    ) -> dict[str, object]:
        sent = time.monotonic()
        reply = call(self, request, fds, *rest)  # type: ignore[arg-type]
        marks = dict(reply["marks"])  # type: ignore[call-overload]
        marks["sent"], marks["replied"] = sent, time.monotonic()
        phases.append(marks)
        return reply

    ForkServer.call = traced  # type: ignore[method-assign]
    bare_sample = []
    for pair in sample:
        bare_sample.append(bare(pair))
        forked(pair)
    ForkServer.call = call  # type: ignore[method-assign]
    steps = [
        ("verifier -> server", "sent", "received"),
        ("clone, new namespaces", "received", "init"),
        ("mounts (/proc /tmp /prog)", "init", "mounted"),
        ("fork, limits, uid, exec", "mounted", "execed"),
        ("program (exec..reaped)", "execed", "reaped"),
        ("kill + reap leftovers", "reaped", "cleaned"),
        ("report -> verifier", "cleaned", "replied"),
    ]
    print(f"\nwhere the time goes, fork server, {len(sample)} pairs (its own timestamps)")
    for label, a, b in steps:
        values = [m[b] - m[a] for m in phases]
        print(f"  {label:28s} {fmt_ms(values)}")
    print(f"  {'bare run, for comparison':28s} {fmt_ms(bare_sample)}")

    sb = per_run.sandbox
    prog = [PYTHON, "-I", "-S", "-B", "/prog/main.py"]
    scratch = tempfile.mkdtemp(dir=sb.scratch_root)
    r_fd, w_fd = os.pipe()
    uid = sb._uids.get()

    def command(kind: str, k: int, filter_fd: int) -> list[str]:
        host_prog = [PYTHON, "-I", "-S", "-B", os.path.join(host, f"p{k}.py")]
        if kind == "bare":
            return host_prog
        if kind == "prlimit":
            return sb._prlimit(limits) + host_prog
        full = sb._bwrap(
            limits, [(builds["per-run"][k], "/prog")], [], "/tmp", {}, w_fd, filter_fd, uid
        )
        if kind == "bwrap":  # no setpriv, no prlimit
            cut = full.index("--info-fd")
            return [*full[:cut], "--", *prog]
        return full + sb._prlimit(limits) + prog

    def layer(kind: str, k: int, data: bytes) -> float:
        filter_fd = seccomp_fd(sb._filter)  # bubblewrap reads its seccomp program to EOF
        try:
            argv = command(kind, k, filter_fd)
            return timed(
                lambda: subprocess.run(
                    argv, input=data, capture_output=True, check=True, pass_fds=(w_fd, filter_fd)
                )
            )
        finally:
            os.close(filter_fd)

    layer_times: dict[str, list[float]] = {}
    for kind in ("bare", "prlimit", "bwrap", "bwrap+setpriv+prlimit"):
        layer_times[kind] = [layer(kind, k, data) for k, data in sample]
    layer_times["Sandbox.run (all)"] = [old(p) for p in sample]
    sb._uids.put(uid)
    os.close(r_fd)
    os.close(w_fd)
    shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.mean(layer_times["bare"])
    print(f"\nwhere the time goes, per-run runner, {len(sample)} pairs each (subprocess.run)")
    for kind, values in layer_times.items():
        extra = (statistics.mean(values) - base) * 1e3
        print(f"  {kind:24s} {fmt_ms(values)}   +{extra:5.2f} ms over bare")

    # 3. throughput
    print(f"\nthroughput over {len(pairs)} pairs")
    for workers in (1, 2):
        for name, fn in (("bare", bare), ("fork server", forked), ("per-run", old)):
            with ThreadPoolExecutor(workers) as pool:
                start = time.perf_counter()
                list(pool.map(fn, pairs))
                wall = time.perf_counter() - start
            plural = "s" if workers > 1 else " "
            print(f"  {name:12s} {workers} worker{plural}  {len(pairs) / wall:7.1f} runs/s")
    for build in [*builds["fork"], *builds["per-run"]]:
        shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(host, ignore_errors=True)
    verifier.close()
    per_run.close()
    mean_over = statistics.mean(overhead) * 1e3
    median_over = statistics.median(overhead) * 1e3
    verdict = "met" if mean_over <= 10 else "NOT met"
    print(
        f"\noverhead per run (fork server) mean {mean_over:.2f} ms, median {median_over:.2f} ms "
        f"(goal <= 10 ms): {verdict}"
    )
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
