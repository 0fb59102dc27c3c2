"""What assert-style judging costs per sample: `Verifier.run_program(lang, candidate, harness=...)`
(compile and run in the sandbox, the verdict cache off) against the same candidate and harness
pasted into one program and built and run bare (no sandbox, no isolation of the harness from the
candidate: the floor), per language, interleaved sample by sample; also the compile and run
seconds the verifier reports.

    uv run python tools/bench/verifier/asserts.py [--repeats 10] [--langs python cpp rust]

Only public API: the same script measures any commit (copy it into an older checkout to compare).
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
from pathlib import Path

from rlx_verifier import Verifier
from rlx_verifier.config import JudgeConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import uptime

# One HumanEval-style problem per language: a right candidate and its harness.
PROBLEMS = {
    "python": (
        "def add_all(xs, k):\n    return [x + k for x in xs]\n",
        "def check(candidate):\n"
        "    assert candidate([1, 2, 3], 1) == [2, 3, 4]\n"
        "    assert candidate([], 5) == []\n"
        "    assert candidate([-1], 1) == [0]\n"
        "check(add_all)\n",
    ),
    "cpp": (
        "#include <vector>\nusing namespace std;\n"
        "vector<int> add_all(vector<int> xs, int k) {\n"
        "    for (auto& x : xs) x += k;\n    return xs;\n}\n",
        "#undef NDEBUG\n#include <assert.h>\n"
        "int main() {\n"
        "    assert(add_all({1, 2, 3}, 1) == (vector<int>{2, 3, 4}));\n"
        "    assert(add_all({}, 5).empty());\n"
        "}\n",
    ),
    "rust": (
        "fn main() {}\nfn add_all(xs: Vec<i32>, k: i32) -> Vec<i32> {\n"
        "    xs.iter().map(|x| x + k).collect()\n}\n",
        "#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n"
        "    fn test_add_all() {\n"
        "        assert_eq!(add_all(vec![1, 2, 3], 1), vec![2, 3, 4]);\n"
        "        assert!(add_all(vec![], 5).is_empty());\n    }\n}\n",
    ),
}


def bare(lang: str, candidate: str, harness: str, work: str) -> float:
    """Seconds to build (if compiled) and run candidate + harness as one unsandboxed program."""
    start = time.perf_counter()
    if lang == "python":
        path = os.path.join(work, "p.py")
        Path(path).write_text(candidate + "\n" + harness)
        subprocess.run([sys.executable, "-I", "-S", "-B", path], check=True, capture_output=True)
    elif lang == "cpp":
        src = os.path.join(work, "p.cpp")
        Path(src).write_text(candidate + "\n" + harness)
        exe = os.path.join(work, "p")
        subprocess.run(["g++", "-O2", "-std=c++17", "-pipe", "-o", exe, src], check=True)
        subprocess.run([exe], check=True, capture_output=True)
    else:
        src = os.path.join(work, "p.rs")
        Path(src).write_text(candidate + "\n" + harness)
        exe = os.path.join(work, "p")
        subprocess.run(
            ["rustc", "-O", "--edition", "2021", "--test", "-o", exe, src],
            check=True,
            capture_output=True,
        )
        subprocess.run([exe, "-q"], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--langs", nargs="+", default=list(PROBLEMS))
    args = parser.parse_args()
    print(f"before: {uptime()}")
    verifier = Verifier(JudgeConfig(workers=1, cache_size=0))
    work = tempfile.mkdtemp(prefix="rlx-bench-asserts-")
    print(f"sandbox: {verifier.sandbox.mode}; {os.cpu_count()} cores; {args.repeats} repeats")
    print(
        f"\n{'lang':8s} {'bare s':>8s} {'rlx s':>8s} {'ratio':>7s} "
        f"{'rlx compile s':>14s} {'rlx run s':>10s}"
    )
    try:
        for lang in args.langs:
            if lang not in verifier.languages:
                print(f"{lang:8s} (no toolchain)")
                continue
            candidate, harness = PROBLEMS[lang]
            bare_t, rlx_t, comp_t, run_t = [], [], [], []
            for i in range(args.repeats + 1):
                b = bare(lang, candidate, harness, work)
                # a fresh comment per call: the verdict cache never answers
                source = candidate + ("\n# " if lang == "python" else "\n// ") + f"{i}\n"
                t0 = time.perf_counter()
                r = verifier.run_program(lang, source, harness=harness, time_limit_s=5.0)
                t = time.perf_counter() - t0
                assert r.status == "AC", (lang, r.status, r.message, r.tests)
                if i == 0:
                    continue  # warm-up
                bare_t.append(b)
                rlx_t.append(t)
                comp_t.append(r.compile_s)
                run_t.append(r.run_s)
            b, t = statistics.median(bare_t), statistics.median(rlx_t)
            print(
                f"{lang:8s} {b:8.3f} {t:8.3f} {t / b:6.2f}x "
                f"{statistics.median(comp_t):14.3f} {statistics.median(run_t):10.3f}"
            )
    finally:
        verifier.close()
        shutil.rmtree(work, ignore_errors=True)
    print("(medians)")
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
