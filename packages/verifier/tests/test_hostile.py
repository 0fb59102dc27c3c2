"""The hostile battery: programs that attack the sandbox or the harness, each with its expected
verdict, then checks that the host is untouched and the verifier still answers."""

# ruff: noqa: E501  (embedded C++ and Python programs keep their own line lengths)

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rlx_verifier import TestCase, Verifier

SECRET = "s3cr3t-answer-7f3a9"
ESCAPE = "rlx-escape-marker"

# (name, language, source, stdin/answer or None for assert style, expected verdicts)
STDIO = TestCase(stdin="", answer="blocked\n")


def py_probe(body: str) -> str:
    """A Python program printing `blocked` when `body` raises, `open` when it succeeds."""
    indented = "\n".join("    " + line for line in body.splitlines())
    return f"try:\n{indented}\n    print('open')\nexcept Exception:\n    print('blocked')\n"


CASES: list[tuple[str, str, str, str | None, set[str]]] = [
    ("py cpu loop", "python", "while True: pass", None, {"TLE"}),
    ("cpp cpu loop", "cpp", "int main(){ volatile long x = 0; for(;;) x++; }", None, {"TLE"}),
    ("py sleep", "python", "import time\ntime.sleep(60)", None, {"TLE"}),
    ("cpp sleep", "cpp", "#include <unistd.h>\nint main(){ for(;;) sleep(10); }", None, {"TLE"}),
    ("py fork bomb", "python", "import os\nwhile True:\n    os.fork()", None, {"RE", "TLE"}),
    (
        "cpp fork bomb",
        "cpp",
        "#include <unistd.h>\nint main(){ for(;;) fork(); }",
        None,
        {"RE", "TLE"},
    ),
    (
        "py thread bomb",
        "python",
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,))"
        ".start()",
        None,
        {"RE", "TLE"},
    ),
    (
        "py memory bomb",
        "python",
        "x = []\nwhile True:\n    x.append(bytearray(1 << 24))",
        None,
        {"MLE"},
    ),
    (
        "cpp memory bomb",
        "cpp",
        "#include <cstdlib>\n#include <cstring>\nint main(){ for(;;){ char* p = (char*)malloc(1<<24);"
        " if(!p) return 3; memset(p, 1, 1<<24);} }",
        None,
        {"MLE", "RE"},
    ),
    (
        "cpp huge stack",
        "cpp",
        "int f(int n){ volatile char b[1<<16]; b[0]=n; return n ? f(n-1) + b[0] : 0; }\n"
        "int main(){ return f(1<<20); }",
        None,
        {"RE"},
    ),
    (
        "py deep recursion",
        "python",
        "import sys\nsys.setrecursionlimit(10**9)\ndef f(n): return f(n + 1) + 1\nf(0)",
        None,
        {"RE", "TLE"},
    ),
    (
        "py output flood",
        "python",
        "import sys\nwhile True: sys.stdout.write('y' * 65536)",
        None,
        {"RE"},
    ),  # assert style: an output flood does not run to the end
    (
        "cpp output flood",
        "cpp",
        '#include <cstdio>\nint main(){ for(;;) fputs("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", stdout); }',
        None,
        {"RE"},
    ),
    ("py output flood vs answer", "python", "while True: print('blocked')", "stdio", {"WA"}),
    (
        "py 2 GiB file",
        "python",
        f"f = open('/tmp/{ESCAPE}', 'wb')\nfor _ in range(2048): f.write(b'z' * (1 << 20))",
        None,
        {"RE"},
    ),
    (
        "cpp 2 GiB file",
        "cpp",
        f'#include <cstdio>\nint main(){{ FILE* f = fopen("/tmp/{ESCAPE}", "wb"); static char b[1<<20];'
        " for(int i = 0; i < 2048; i++) if (fwrite(b, 1, sizeof b, f) != sizeof b) return 1; }",
        None,
        {"RE"},
    ),
    (
        "py network 1.1.1.1",
        "python",
        py_probe(
            "socket = __import__('socket')\nsocket.create_connection(('1.1.1.1', 53), timeout=2)"
        ),
        "stdio",
        {"AC"},
    ),
    (
        "py own port",
        "python",
        py_probe("socket = __import__('socket')\nsocket.create_connection(('127.0.0.1', PORT), 2)"),
        "stdio",
        {"AC"},
    ),
    ("py /etc/shadow", "python", py_probe("open('/etc/shadow').read()"), "stdio", {"AC"}),
    (
        "py write home",
        "python",
        py_probe(f"open('/root/{ESCAPE}', 'w').write('x')"),
        "stdio",
        {"AC"},
    ),
    (
        "py write workdir",
        "python",
        py_probe(f"open('/work/{ESCAPE}', 'w').write('x')"),
        "stdio",
        {"AC"},
    ),
    (
        "py kill pid 1",
        "python",
        py_probe("import os, signal\nos.kill(1, signal.SIGKILL)"),
        "stdio",
        {"AC"},
    ),
    (
        "py kill parent",
        "python",
        py_probe("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
        "stdio",
        {"AC"},
    ),
    (
        "py ptrace parent",
        "python",
        py_probe(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "assert libc.ptrace(16, 1, 0, 0) == 0"
        ),
        "stdio",
        {"AC"},
    ),
    (
        "py environment",
        "python",
        "import os\nextra = set(os.environ) - {'PATH', 'HOME', 'LANG', 'PWD', 'LC_CTYPE'}\n"
        "print('blocked' if not extra else sorted(extra))",
        "stdio",
        {"AC"},
    ),
    (
        "py find the answer",
        "python",
        "import os\nfound = []\nfor top in ('/tmp', '/prog', '/data', '/checker', '/'):\n"
        "    for root, dirs, files in os.walk(top):\n"
        "        dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'usr', 'dev')]\n"
        "        for f in files:\n"
        "            try: found.append(open(os.path.join(root, f), errors='ignore').read(1 << 16))\n"
        "            except OSError: pass\n"
        # the secret is spelled backwards here: the program's own source must not match
        f"s = '{SECRET[::-1]}'[::-1]\nprint(s if any(s in t for t in found) else 'blocked')",
        "secret",
        {"WA"},
    ),
    (
        "py exec shell",
        "python",
        f"import os\nos.execv('/bin/sh', ['sh', '-c', 'touch /work/{ESCAPE} /root/{ESCAPE} 2>/dev/null;"
        " echo blocked'])",
        "stdio",
        {"AC"},
    ),
]

# Assert-style tricks: the candidate defines `add` wrongly and tries to pass anyway.
HARNESS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
CPP_HARNESS = (
    "#include <cassert>\nint main() {\n    assert(add(1, 2) == 3);\n    assert(add(2, 2) == 4);\n}"
)
TRICKS: list[tuple[str, str, str, str, set[str]]] = [
    (
        "py sys.exit(0) before asserts",
        "python",
        "import sys\ndef add(a, b): return 0\nsys.exit(0)",
        HARNESS,
        {"RE"},
    ),
    (
        "py os._exit(0) before asserts",
        "python",
        "import os\ndef add(a, b): return 0\nos._exit(0)",
        HARNESS,
        {"RE"},
    ),
    (
        "py ctypes _exit(0)",
        "python",
        "import ctypes\ndef add(a, b): return 0\nctypes.CDLL(None)._exit(0)",
        HARNESS,
        {"RE"},
    ),
    (
        "py exit in atexit",
        "python",
        "import atexit, os\ndef add(a, b): return 0\natexit.register(lambda: os._exit(0))",
        HARNESS,
        {"RE", "WA"},
    ),
    (
        "py rebinding AssertionError",
        "python",
        "import builtins\nclass Nope(Exception): pass\nbuiltins.AssertionError = Nope\n"
        "AssertionError = Nope\ndef add(a, b): return 0",
        HARNESS,
        {"WA"},
    ),
    (
        "py always-equal object",
        "python",
        "class Eq:\n    def __eq__(self, other): return True\ndef add(a, b): return Eq()",
        HARNESS,
        {"RE", "WA"},
    ),
    (
        "py int subclass always equal",
        "python",
        "class Eq(int):\n    def __eq__(self, other): return True\ndef add(a, b): return Eq(0)",
        HARNESS,
        {"RE", "WA"},
    ),
    (
        "py settrace skips asserts",
        "python",
        "import sys\ndef add(a, b): return 0\ndef t(frame, event, arg):\n"
        "    if event == 'line' and frame.f_code.co_filename == 'harness.py':\n"
        "        frame.f_lineno = frame.f_lineno + 1\n    return t\nsys.settrace(t)",
        HARNESS,
        {"WA"},  # the tracer runs in the candidate's process, the asserts in the judge's
    ),
    (
        "py redefining check",
        "python",
        "def add(a, b): return 0\ndef check(candidate): pass",
        "def check(candidate):\n    assert candidate(1, 2) == 3\ncheck(add)\n",
        {"WA"},
    ),
    (
        "py print a fake marker",
        "python",
        "import sys\ndef add(a, b): return 0\nprint('0' * 32)\nsys.exit(0)",
        HARNESS,
        {"RE"},
    ),
    (
        "cpp exit(0) before asserts",
        "cpp",
        "#include <cstdlib>\nint add(int a, int b) { std::exit(0); }",
        CPP_HARNESS,
        {"RE"},
    ),
    (
        "cpp quick_exit from a static",
        "cpp",
        "#include <cstdlib>\nstruct Q { ~Q() {} } q;\nint add(int a, int b) { std::quick_exit(0); }",
        CPP_HARNESS,
        {"RE"},
    ),
    (
        "cpp neutralised assert",
        "cpp",
        "#define NDEBUG\n#include <cassert>\n#undef assert\n#define assert(x) ((void)0)\n"
        "int add(int a, int b) { return 0; }",
        CPP_HARNESS,
        {"WA"},
    ),
]

COMPILE_BOMBS: list[tuple[str, str, set[str]]] = [
    ("include /dev/urandom", "#include </dev/urandom>\nint main(){}", {"CE"}),
    (
        "template explosion",
        "template<int N> struct F { static const long v = F<N-1>::v + F<N-2>::v; };\n"
        "template<> struct F<0> { static const long v = 0; };\n"
        "template<> struct F<1> { static const long v = 1; };\n"
        "template<int N, int M> struct E { using T = typename E<N-1, M>::T; };\n"
        "template<int M> struct E<0, M> { using T = int; };\n"
        "#define X(n) E<n, __LINE__>::T v##n; \n"
        "int main(){ return F<100000>::v > 0; }",
        {"CE"},
    ),
    (
        "2^40 array",
        "static char a[1LL << 40];\nint main(){ a[12345] = 1; return a[1]; }",
        {"CE", "RE", "MLE"},
    ),
]


def sandbox_processes() -> list[int]:
    """Host pids running as a sandbox uid (61000 and up)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if uid >= 61000:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_hostile_battery(verifier: Verifier) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    total = len(CASES) + len(TRICKS) + len(COMPILE_BOMBS)
    assert total >= 30

    def run_case(case: tuple[str, str, str, str | None, set[str]]) -> str:
        name, lang, source, tests, _ = case
        source = source.replace("PORT", str(port))
        if tests is None:
            # a memory bomb must end on its memory limit, not on the clock: the battery runs
            # its cases together on 2 cores, and a 1 s limit (3 s wall) once ran out first (TLE)
            limit = 5.0 if "memory bomb" in name else 1.0
            return verifier.run_program(lang, source, time_limit_s=limit, memory_mb=256).status
        test = TestCase(stdin="", answer=SECRET) if tests == "secret" else STDIO
        return verifier.judge(lang, source, [test], time_limit_s=2.0, memory_mb=256).status

    def run_trick(trick: tuple[str, str, str, str, set[str]]) -> str:
        _, lang, source, harness, _ = trick
        return verifier.run_program(lang, source, harness=harness, time_limit_s=2.0).status

    def run_bomb(bomb: tuple[str, str, set[str]]) -> str:
        return verifier.run_program("cpp", bomb[1], time_limit_s=1.0).status

    try:
        got = {c[0]: s for c, s in zip(CASES, verifier.map(run_case, CASES), strict=True)}
        got |= {t[0]: s for t, s in zip(TRICKS, verifier.map(run_trick, TRICKS), strict=True)}
        got |= {
            b[0]: s
            for b, s in zip(COMPILE_BOMBS, verifier.map(run_bomb, COMPILE_BOMBS), strict=True)
        }
        listener.settimeout(0.1)
        with pytest.raises(TimeoutError):  # nothing reached the verifier's own port
            listener.accept()
    finally:
        listener.close()
    expected = {c[0]: c[-1] for c in [*CASES, *TRICKS, *COMPILE_BOMBS]}
    wrong = {name: got[name] for name in expected if got[name] not in expected[name]}
    assert not wrong, wrong
    # The host is untouched: no sandbox process left, no file escaped, the verifier answers.
    assert sandbox_processes() == []
    for path in (f"/tmp/{ESCAPE}", f"/work/{ESCAPE}", f"/root/{ESCAPE}"):
        assert not os.path.exists(path), path
    # only the verifier's own Go build-cache seed may stay in its scratch root
    assert [p for p in os.listdir(verifier.sandbox.scratch_root) if p != "goseed"] == []
    ok = verifier.judge("python", "print(int(input()) + 1)", [TestCase(stdin="1", answer="2")])
    assert ok.status == "AC"
