"""Reward hacks against the assert-style judge: a wrong candidate that exits "successfully" from
inside the tests, finds the per-request marker (in a file, the environment, argv, stdin, the
interpreter's frames) or prints it before the harness runs, must never be AC; and an output that
hangs a special checker is the program's WA, not INFRA. (Python has no marker: its verdict is the
exit status of a judge process the candidate's code never runs in; its own hacks are in
test_judge_python.py. A Python candidate printing a token it found still must not pass.)"""

# ruff: noqa: E501  (embedded programs keep their own line lengths)

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx_verifier import TestCase, Verifier
from rlx_verifier.config import JudgeConfig
from rlx_verifier.sandbox import Limits

HARNESS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
RIGHT = "def add(a, b):\n    return a + b\n"

# Each candidate's `add` is wrong (or never returns): only a hack could make it AC.
PY_EXITS = {
    "sys.exit()": "import sys\ndef add(a, b):\n    sys.exit()\n",
    "sys.exit(0)": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "raise SystemExit": "def add(a, b):\n    raise SystemExit\n",
    "raise SystemExit(0)": "def add(a, b):\n    raise SystemExit(0)\n",
    "exit()": "def add(a, b):\n    exit()\n",
    "quit()": "def add(a, b):\n    quit()\n",
    "nested function": "import sys\ndef add(a, b):\n    def inner():\n        sys.exit(0)\n    inner()\n",
    "generator": "import sys\ndef gen():\n    yield 0\n    sys.exit(0)\ndef add(a, b):\n    return sum(gen())\n",
    "method": "class C:\n    def m(self):\n        raise SystemExit(None)\ndef add(a, b):\n    return C().m()\n",
    "__eq__ the asserts call": "import sys\nclass E:\n    def __eq__(self, other):\n        sys.exit(0)\ndef add(a, b):\n    return E()\n",
    "thread": "import sys, threading\ndef add(a, b):\n    t = threading.Thread(target=sys.exit, args=(0,))\n    t.start()\n    t.join()\n    return 0\n",
    "__del__": "import sys\nclass D:\n    def __del__(self):\n        sys.exit(0)\ndef add(a, b):\n    D()\n    return 0\n",
    "atexit": "import atexit, sys\natexit.register(sys.exit, 0)\ndef add(a, b):\n    return 0\n",
    "a function compiled as harness.py": 'exec(compile("def add(a, b):\\n    raise SystemExit(0)\\n", "harness.py", "exec"))\n',
    "a signal handler": "import os, signal, sys\nsignal.signal(signal.SIGUSR1, lambda *a: sys.exit(0))\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGUSR1)\n    return 0\n",
}


@pytest.mark.parametrize("name", list(PY_EXITS))
def test_python_system_exit_from_the_candidate_is_not_ac(verifier: Verifier, name: str) -> None:
    r = verifier.run_program("python", PY_EXITS[name], harness=HARNESS, time_limit_s=5.0)
    assert r.status in ("RE", "WA"), (r.status, r.tests[0].stderr if r.tests else r.message)


def test_python_harness_may_exit_zero_itself(verifier: Verifier) -> None:
    harness = "import sys\ndef check(f):\n    assert f(1, 2) == 3\n    sys.exit(0)\ncheck(add)\n"
    assert verifier.run_program("python", RIGHT, harness=harness).status == "AC"
    assert verifier.run_program("python", RIGHT.replace("+", "-"), harness=harness).status == "WA"
    early = "import sys\nsys.exit(0)\nassert add(1, 2) == 3\n"  # the harness's own choice
    assert verifier.run_program("python", RIGHT, harness=early).status == "AC"


# A Python candidate that looks for a 32-hex-digit token everywhere it can read, prints the
# first one as the harness's last line would, and exits 0.
PY_FINDER = r"""
import gc, os, re, sys
HEX = re.compile(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
def blobs():
    for path in ("/prog/main.py", "/proc/self/cmdline", "/proc/self/environ", "/proc/self/fd/0", "/proc/self/exe"):
        try:
            with open(path, "rb") as f:
                yield f.read()
        except Exception:
            pass
    for root, _, files in os.walk("/prog"):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    yield f.read()
            except Exception:
                pass
    yield repr(dict(os.environ)).encode() + repr(sys.argv).encode()
    try:
        os.lseek(0, 0, os.SEEK_SET)
        yield os.read(0, 1 << 16)
    except Exception:
        pass
    frames = []
    try:
        frames.append(sys._getframe())
    except Exception:
        pass
    try:
        raise KeyError
    except KeyError as e:
        try:
            frames.append(e.__traceback__.tb_frame)
        except Exception:
            pass
    for f in frames:
        while f is not None:
            yield repr(f.f_locals).encode() + repr(f.f_globals).encode()
            f = f.f_back
    try:
        yield repr([o for o in gc.get_objects() if type(o) in (dict, list, tuple, bytes)]).encode()
    except Exception:
        pass
def add(a, b):
    for blob in blobs():
        m = HEX.search(blob)
        if m:
            os.write(1, b"\n" + m.group() + b"\n")
            os._exit(0)
    return 0
"""

PY_OWN_SOURCE = r"""
import os, re
def add(a, b):
    m = re.search(r'_MARK = "([0-9a-f]+)"', open('/prog/main.py').read())
    if m:
        os.write(1, ("\n" + m.group(1) + "\n").encode())
        os._exit(0)
    return 0
"""


@pytest.mark.parametrize("source", [PY_OWN_SOURCE, PY_FINDER], ids=["own source", "everywhere"])
def test_python_candidate_cannot_find_the_marker(verifier: Verifier, source: str) -> None:
    r = verifier.run_program("python", source, harness=HARNESS, time_limit_s=5.0)
    # WA: nothing found; RE: some other 32-hex-digit string found and printed (not the marker)
    assert r.status in ("WA", "RE"), (r.status, r.tests[0].stderr if r.tests else r.message)


def test_python_harness_still_reads_stdin(verifier: Verifier) -> None:
    source = (
        "import sys\nDATA = sys.stdin.read()\ndef add(a, b):\n    return a + b + len(DATA) - 4\n"
    )
    r = verifier.run_program("python", source, harness=HARNESS, stdin="abcd")
    assert r.status == "AC", r


# The same search in C++, Rust and Go: the candidate's function, and code that runs before main.
CPP_FINDER = r"""
#include <fcntl.h>
#include <unistd.h>
#include <cstring>
static bool rlx_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
static void rlx_try(int fd) {
    if (fd < 0) return;
    static char buf[1 << 23];
    long n = 0, k;
    while (n < (long)sizeof buf && (k = read(fd, buf + n, sizeof buf - n)) > 0) n += k;
    close(fd);
    for (long i = 0; i + 32 <= n; i++) {
        long j = i;
        while (j < n && rlx_hex(buf[j])) j++;
        if (j - i == 32 && (i == 0 || !rlx_hex(buf[i - 1]))) {
            char out[34]; out[0] = '\n'; memcpy(out + 1, buf + i, 32); out[33] = '\n';
            if (write(1, out, 34) == 34) _exit(0);
        }
        i = j;
    }
}
static void rlx_find() {
    const char* paths[] = {"/prog/main", "/prog/main.cpp", "/proc/self/exe", "/proc/self/cmdline",
                           "/proc/self/environ", "/proc/self/fd/0"};
    for (const char* p : paths) rlx_try(open(p, O_RDONLY));
    lseek(0, 0, SEEK_SET);
    rlx_try(dup(0));
}
"""
CPP_HARNESS = (
    "#include <cassert>\nint main() {\n    assert(add(1, 2) == 3);\n    assert(add(2, 2) == 4);\n}"
)
CPP_CASES = {
    "in the function": CPP_FINDER + "int add(int a, int b) { rlx_find(); return 0; }\n",
    "static initializer": CPP_FINDER
    + "struct Early { Early() { rlx_find(); } } early;\nint add(int a, int b) { return 0; }\n",
    "constructor(101)": CPP_FINDER
    + "__attribute__((constructor(101))) static void early() { rlx_find(); }\nint add(int a, int b) { return 0; }\n",
    "preinit_array": CPP_FINDER
    + 'static void early() { rlx_find(); }\n__attribute__((section(".preinit_array"), used)) static void (*early_p)() = early;\nint add(int a, int b) { return 0; }\n',
    "ifunc resolver": CPP_FINDER
    + 'extern "C" int add_impl(int a, int b) { return 0; }\nextern "C" void* resolve_add() { rlx_find(); return (void*)add_impl; }\nextern "C" int add_if(int, int) __attribute__((ifunc("resolve_add")));\nint add(int a, int b) { return add_if(a, b); }\n',
    "exit(0)": "#include <cstdlib>\nint add(int a, int b) { std::exit(0); }\n",
    "_exit(0) in a static initializer": "#include <unistd.h>\nstruct Early { Early() { _exit(0); } } early;\nint add(int a, int b) { return 0; }\n",
}

RUST_FINDER = r"""
fn rlx_find() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    for p in ["/prog/main", "/prog/main.rs", "/proc/self/exe", "/proc/self/cmdline", "/proc/self/environ", "/proc/self/fd/0"] {
        if let Ok(b) = std::fs::read(p) { blobs.push(b); }
    }
    let mut stdin = std::fs::File::from(std::io::stdin().lock().as_fd().try_clone_to_owned().unwrap());
    let _ = stdin.seek(SeekFrom::Start(0));
    let mut b = Vec::new();
    let _ = stdin.read_to_end(&mut b);
    blobs.push(b);
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    for b in blobs {
        let mut i = 0;
        while i + 32 <= b.len() {
            let mut j = i;
            while j < b.len() && hex(b[j]) { j += 1; }
            if j - i == 32 && (i == 0 || !hex(b[i - 1])) {
                let mut out = vec![b'\n'];
                out.extend_from_slice(&b[i..j]);
                out.push(b'\n');
                let _ = std::io::stdout().write_all(&out);
                let _ = std::io::stdout().flush();
                std::process::exit(0);
            }
            i = j + 1;
        }
    }
}
use std::os::fd::AsFd;
"""
RUST_HARNESS = "#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn test_add() {\n        assert_eq!(add(1, 2), 3);\n        assert_eq!(add(2, 2), 4);\n    }\n}\n"
RUST_CASES = {
    "in the function": RUST_FINDER + "fn add(a: i32, b: i32) -> i32 { rlx_find(); 0 }\n",
    "init_array": RUST_FINDER
    + '#[used]\n#[unsafe(link_section = ".init_array")]\nstatic EARLY: extern "C" fn() = { extern "C" fn early() { rlx_find(); } early };\nfn add(a: i32, b: i32) -> i32 { 0 }\n',
    "process::exit(0)": "fn add(a: i32, b: i32) -> i32 { std::process::exit(0) }\n",
    "shadowed assert_eq!": "macro_rules! assert_eq { ($($t:tt)*) => {} }\nfn add(a: i32, b: i32) -> i32 { 0 }\n",
}

GO_FINDER = r"""
package main

import (
    "os"
    "regexp"
)

func rlxFind() {
    hex := regexp.MustCompile(`(^|[^0-9a-f])([0-9a-f]{32})([^0-9a-f]|$)`)
    var blobs [][]byte
    for _, p := range []string{"/prog/main", "/prog/main_test.go", "/prog/rlx_main_test.go", "/proc/self/exe", "/proc/self/cmdline", "/proc/self/environ", "/proc/self/fd/0"} {
        if b, err := os.ReadFile(p); err == nil {
            blobs = append(blobs, b)
        }
    }
    os.Stdin.Seek(0, 0)
    buf := make([]byte, 1<<16)
    n, _ := os.Stdin.Read(buf)
    blobs = append(blobs, buf[:n])
    for _, b := range blobs {
        if m := hex.FindSubmatch(b); m != nil {
            os.Stdout.Write(append(append([]byte("\n"), m[2]...), '\n'))
            os.Exit(0)
        }
    }
}
"""
GO_HARNESS = 'package main\n\nimport (\n    "testing"\n    "github.com/stretchr/testify/assert"\n)\n\nfunc TestAdd(t *testing.T) {\n    assert := assert.New(t)\n    assert.Equal(3, Add(1, 2))\n    assert.Equal(4, Add(2, 2))\n}\n'
GO_CASES = {
    "in the function": GO_FINDER + "func Add(a, b int) int { rlxFind(); return 0 }\n",
    "init()": GO_FINDER + "func init() { rlxFind() }\nfunc Add(a, b int) int { return 0 }\n",
    "package variable": GO_FINDER
    + "var early = func() int { rlxFind(); return 0 }()\nfunc Add(a, b int) int { return early }\n",
    "os.Exit(0)": 'package main\n\nimport "os"\n\nfunc Add(a, b int) int { os.Exit(0); return 0 }\n',
    "no tests run (os.Args)": 'package main\n\nimport "os"\n\nfunc init() { os.Args = append(os.Args, "-test.run=^$") }\nfunc Add(a, b int) int { return 0 }\n',
}
RIGHT_COMPILED = {
    "cpp": ("int add(int a, int b) { return a + b; }\n", CPP_HARNESS),
    "rust": ("fn add(a: i32, b: i32) -> i32 { a + b }\n", RUST_HARNESS),
    "go": ("package main\n\nfunc Add(a, b int) int { return a + b }\n", GO_HARNESS),
}


def _need(verifier: Verifier, lang: str) -> None:
    if lang not in verifier.languages:
        pytest.skip(f"no {lang} toolchain")
    if lang == "go" and not verifier.languages["go"].test_compile:
        pytest.skip("no testify for assert-style Go")


@pytest.mark.parametrize(
    ("lang", "name"),
    [("cpp", n) for n in CPP_CASES]
    + [("rust", n) for n in RUST_CASES]
    + [("go", n) for n in GO_CASES],
)
def test_compiled_candidate_cannot_find_or_fake_the_marker(
    verifier: Verifier, lang: str, name: str
) -> None:
    _need(verifier, lang)
    source = {"cpp": CPP_CASES, "rust": RUST_CASES, "go": GO_CASES}[lang][name]
    harness = RIGHT_COMPILED[lang][1]
    r = verifier.run_program(lang, source, harness=harness, time_limit_s=5.0)
    assert r.status in ("WA", "RE"), (r.status, r.compile_output, r.tests)


@pytest.mark.parametrize("lang", list(RIGHT_COMPILED))
def test_compiled_right_candidate_is_ac(verifier: Verifier, lang: str) -> None:
    _need(verifier, lang)
    source, harness = RIGHT_COMPILED[lang]
    r = verifier.run_program(lang, source, harness=harness, time_limit_s=5.0)
    assert r.status == "AC", (r.status, r.compile_output, r.tests)
    wrong = source.replace("a + b", "a - b")
    assert verifier.run_program(lang, wrong, harness=harness, time_limit_s=5.0).status == "WA"


# A checker (testlib protocol) that loops forever on the output "loop" and checks a sum otherwise.
LOOPING_CHECKER = """#!/usr/bin/python3
import sys
out = open(sys.argv[2]).read().split()
if out == ["loop"]:
    while True:
        pass
n = int(open(sys.argv[1]).read())
sys.exit(0 if len(out) == 1 and int(out[0]) == n else 1)
"""


@pytest.fixture(scope="module")
def quick_checkers() -> Iterator[Verifier]:
    v = Verifier(JudgeConfig(workers=1, infra_retries=0))
    v.checker_limits = Limits(cpu_s=1.0, wall_s=3.0, memory_mb=1024, nproc=16, output_mb=16)
    yield v
    v.close()


def test_output_that_hangs_the_checker_is_wa(quick_checkers: Verifier, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    checker = tmp_path / "check.py"
    checker.write_text(LOOPING_CHECKER)
    checker.chmod(0o755)
    tests = [TestCase(stdin="7\n", answer="7\n")]
    ok = quick_checkers.judge("python", "print(input())", tests, checker=str(checker))
    assert ok.status == "AC", ok
    hang = quick_checkers.judge("python", "print('loop')", tests, checker=str(checker))
    assert hang.status == "WA" and hang.score == 0.0, hang
    assert "checker" in hang.tests[0].message
    # the checker times out on the jury's answer too: the checker is broken, INFRA
    jury = [TestCase(stdin="7\n", answer="loop\n")]
    broken = quick_checkers.judge("python", "print('loop')", jury, checker=str(checker))
    assert broken.status == "INFRA" and broken.score is None, broken
