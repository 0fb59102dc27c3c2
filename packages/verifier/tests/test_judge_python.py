"""Assert-style Python judging: the candidate runs in a process of its own and only plain data
crosses back to the judge. Wrong candidates that try to game the harness (always-equal results,
rebinding the judge's helpers, reading the judge's memory, patching what the harness calls,
exiting early, attacking the judge's process) are never AC; right ones are."""

# ruff: noqa: E501  (embedded programs keep their own line lengths)

from __future__ import annotations

import marshal

import pytest

from rlx_core.clients.verifier import VerifySample
from rlx_verifier import Verifier, assert_python

from .conftest import judge_one

ADD = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
ALWAYS_EQUAL = (
    "class E:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
)
AREA = "import math\nassert math.isclose(area(2.0), 12.566370614359172, rel_tol=1e-9)\n"

# A candidate that reads its own memory through /proc/self/mem opened relative to a directory
# descriptor, finds a 32-hex-digit token followed by a newline, prints it as a harness's last line
# would and exits 0.
MEMORY_THIEF = r"""
import os, re
def _steal():
    root = os.open("/", os.O_RDONLY)
    maps = os.open("proc/self/maps", os.O_RDONLY, dir_fd=root)
    text = b""
    while chunk := os.read(maps, 1 << 16):
        text += chunk
    mem = os.open("proc/self/mem", os.O_RDONLY, dir_fd=root)
    token = re.compile(rb"(?<![0-9a-f])([0-9a-f]{32})\n")
    for line in text.decode().splitlines():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if not perms.startswith("rw") or hi - lo > 1 << 26:
            continue
        try:
            found = token.search(os.pread(mem, hi - lo, lo))
        except OSError:
            continue
        if found:
            return found.group(1)
def add(a, b):
    mark = _steal()
    if mark:
        os.write(1, b"\n" + mark + b"\n")
        os._exit(0)
    return 0
"""

# name: (wrong candidate, harness). Every candidate is wrong: only a hack could make it AC.
HACKS: dict[str, tuple[str, str]] = {
    # the returned-value check dodged
    "always-equal, __module__ reassigned": (
        ALWAYS_EQUAL + "def add(a, b):\n    return E()\nadd.__module__ = 'builtins'\n",
        ADD,
    ),
    "always-equal through functools.partial": (
        ALWAYS_EQUAL
        + "import functools\ndef _add(x, a, b):\n    return E()\nadd = functools.partial(_add, 0)\n",
        ADD,
    ),
    "always-equal class": (ALWAYS_EQUAL + "def add(a, b):\n    return E()\n", ADD),
    "int subclass with a lying __eq__": (
        "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\nadd.__module__ = 'operator'\n",
        ADD,
    ),
    "str subclass with a lying __eq__": (
        "class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\ndef greet(name):\n    return S('')\ngreet.__module__ = None\n",
        "assert greet('Ann') == 'Hello, Ann!'\n",
    ),
    "always-equal inside a list": (
        ALWAYS_EQUAL + "def add(a, b):\n    return [E()]\nadd.__module__ = 'builtins'\n",
        "assert add(1, 2) == [3]\n",
    ),
    # the judge's helpers rebound through sys.modules["__main__"]
    "__main__ guard rebound": (
        "import sys\nsys.modules['__main__']._guard = lambda f, own: f\n"
        + ALWAYS_EQUAL
        + "def add(a, b):\n    return E()\n",
        ADD,
    ),
    "__main__ frame check rebound, SystemExit(0)": (
        "import sys\nm = sys.modules['__main__']\nclass All(dict):\n    def __contains__(self, key):\n        return True\n"
        "m._codes = lambda code, found: All()\nm._guard = lambda f, own: f\ndef add(a, b):\n    raise SystemExit(0)\n",
        ADD,
    ),
    "__main__ tracer rebound to steal the marker": (
        "import os, sys\ndef steal(arg):\n    mark = sys._getframe(1).f_locals['mark']\n    os.write(1, b'\\n' + mark + b'\\n')\n    os._exit(0)\n"
        "sys.modules['__main__']._TRACE = steal\ndef add(a, b):\n    return 0\n",
        ADD,
    ),
    "__main__ plain-data check rebound": (
        "import sys\nsys.modules['__main__']._plain = lambda v, depth=0: True\n"
        + ALWAYS_EQUAL
        + "def add(a, b):\n    return E()\n",
        ADD,
    ),
    # memory read through /proc
    "/proc/self/mem through dir_fd": (MEMORY_THIEF, ADD),
    "the parent's /proc/PPID/mem through dir_fd": (
        "import os\ndef add(a, b):\n    proc = os.open('/proc', os.O_RDONLY)\n    os.open(f'{os.getppid()}/mem', os.O_RDWR, dir_fd=proc)\n    return a + b\n",
        ADD,
    ),
    "the parent's /proc/PPID/environ": (
        "import os\ndef add(a, b):\n    open(f'/proc/{os.getppid()}/environ', 'rb').read()\n    return a + b\n",
        ADD,
    ),
    "the parent's /proc/PPID/fd": (
        "import os\ndef add(a, b):\n    os.listdir(f'/proc/{os.getppid()}/fd')\n    return a + b\n",
        ADD,
    ),
    "ptrace the parent via ctypes": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef add(a, b):\n    if libc.ptrace(0x4206, os.getppid(), 0, 0) != 0:\n        raise OSError(ctypes.get_errno(), 'ptrace')\n    return a + b\n",
        ADD,
    ),
    # patching what the harness calls
    "math.isclose patched": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef area(r):\n    return 0.0\n",
        AREA,
    ),
    "a fake math in sys.modules": (
        "import sys, types\nfake = types.ModuleType('math')\nfake.isclose = lambda *a, **k: True\nsys.modules['math'] = fake\ndef area(r):\n    return 0.0\n",
        AREA,
    ),
    "unittest.TestCase.assertEqual patched": (
        "import unittest\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\ndef add(a, b):\n    return 0\n",
        "import unittest\nunittest.TestCase().assertEqual(add(1, 2), 3)\n",
    ),
    "builtins.abs patched": (
        "import builtins\nbuiltins.abs = lambda x: 0\ndef add(a, b):\n    return 7.0\n",
        "assert abs(add(0.1, 0.2) - 0.3) < 1e-9\n",
    ),
    "abs shadowed by a top-level def": (
        "def abs(x):\n    return 0\ndef add(a, b):\n    return 7.0\n",
        "assert abs(add(0.1, 0.2) - 0.3) < 1e-9\n",
    ),
    "len and sorted shadowed": (
        "def len(x):\n    return 5\ndef sorted(x):\n    return [0, 2, 4, 6, 8]\ndef evens(n):\n    return []\n",
        "assert len(evens(10)) == 5\nassert sorted(evens(10)) == [0, 2, 4, 6, 8]\n",
    ),
    "__builtins__ rebound": (
        "__builtins__ = {'len': lambda x: 5, 'sorted': lambda x: [0, 2, 4, 6, 8]}\ndef evens(n):\n    return []\n",
        "assert len(evens(10)) == 5\nassert sorted(evens(10)) == [0, 2, 4, 6, 8]\n",
    ),
    # leaving early
    "SystemExit(0) at import": ("import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n", ADD),
    "SystemExit(0) in a call": ("def add(a, b):\n    raise SystemExit(0)\n", ADD),
    "KeyboardInterrupt in a call": ("def add(a, b):\n    raise KeyboardInterrupt\n", ADD),
    "os._exit(0) in a call": ("import os\ndef add(a, b):\n    os._exit(0)\n", ADD),
    "os._exit(0) at import": ("import os\ndef add(a, b):\n    return 0\nos._exit(0)\n", ADD),
    # the judge's process attacked
    "killing the parent": (
        "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return a + b\n",
        ADD,
    ),
    "a forged protocol message": (
        "import os\nos.write(4, (5).to_bytes(4, 'big') + b'hello')\ndef add(a, b):\n    return 0\n",
        ADD,
    ),
    "printing fake output": (
        "def add(a, b):\n    print('\\n' + '0' * 32)\n    print('OK')\n    return 0\n",
        ADD,
    ),
}


@pytest.mark.parametrize("name", list(HACKS))
def test_a_hack_is_not_ac(verifier: Verifier, name: str) -> None:
    source, harness = HACKS[name]
    r = verifier.run_program("python", source, harness=harness, time_limit_s=5.0)
    assert r.status in ("WA", "RE"), (r.status, r.tests[0].stderr if r.tests else r.message)


@pytest.mark.parametrize(
    "name",
    [
        "always-equal, __module__ reassigned",
        "always-equal through functools.partial",
        "__main__ guard rebound",
        "/proc/self/mem through dir_fd",
        "math.isclose patched",
        "unittest.TestCase.assertEqual patched",
    ],
)
def test_a_hack_scores_zero_through_the_controllers_scoring_path(
    verifier: Verifier, name: str
) -> None:
    source, harness = HACKS[name]
    r = judge_one(verifier, VerifySample.asserts(name, "python", source, harness))
    assert r.status in ("WA", "RE") and r.score == 0.0, r


def test_the_judge_cannot_be_traced_and_the_candidate_has_no_capability(
    verifier: Verifier,
) -> None:
    # every attempt's outcome, reported as plain data: the harness checks each one
    source = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempts():
    parent = os.getppid()
    out = {}
    out["ptrace"] = 0 if libc.ptrace(0x4206, parent, 0, 0) == 0 else ctypes.get_errno()
    for name in ("mem", "environ", "fd"):
        try:
            os.listdir(f"/proc/{parent}/fd") if name == "fd" else open(f"/proc/{parent}/{name}", "rb").close()
            out[name] = 0
        except OSError as e:
            out[name] = e.errno
    with open("/proc/self/status") as f:
        out["caps"] = {k: int(v, 16) for k, v in (line.split(":") for line in f) if k.startswith("Cap")}
    return out
"""
    harness = (
        "import errno\nr = attempts()\n"
        "assert r['ptrace'] == errno.EPERM, r\n"
        "assert r['mem'] == r['environ'] == r['fd'] == errno.EACCES, r\n"
        "assert r['caps']['CapEff'] == r['caps']['CapPrm'] == r['caps']['CapBnd'] == 0, r\n"
    )
    r = verifier.run_program("python", source, harness=harness)
    assert r.status == "AC", r.tests[0].stderr if r.tests else r.message


# --- right programs stay AC ----------------------------------------------------------------------

RIGHT: dict[str, tuple[str, str, str]] = {  # name: (candidate, harness, stdin)
    "HumanEval style": (
        "from typing import List\n\ndef below_zero(operations: List[int]) -> bool:\n    balance = 0\n    for op in operations:\n        balance += op\n        if balance < 0:\n            return True\n    return False\n",
        "METADATA = {'author': 'jt'}\n\ndef check(candidate):\n    assert candidate([]) == False\n    assert candidate([1, 2, -4, 5, 6]) == True\n    assert candidate([1, -1, 2, -2, 5, -5, 4, -4]) == False\n\ncheck(below_zero)\n",
        "",
    ),
    "stdin read at import": (
        "import sys\nDATA = sys.stdin.read().split()\ndef total():\n    return sum(map(int, DATA))\n",
        "assert total() == 6\nassert DATA == ['1', '2', '3']\n",
        "1 2\n3\n",
    ),
    "prints": (
        "print('starting')\ndef add(a, b):\n    print('adding', a, b)\n    return a + b\n",
        "print('tests')\n" + ADD,
        "",
    ),
    "expected exceptions": (
        "class Odd(Exception):\n    pass\ndef root(x):\n    if x < 0:\n        raise ValueError('negative', x)\n    if x == 3:\n        raise Odd('three')\n    return x ** 0.5\n",
        "try:\n    root(-1)\nexcept ValueError as e:\n    assert e.args == ('negative', -1)\nelse:\n    raise AssertionError('no ValueError')\n"
        "try:\n    root(3)\nexcept RuntimeError as e:\n    assert str(e) == \"the candidate raised Odd: 'three'\"\nelse:\n    raise AssertionError('no RuntimeError')\n"
        "try:\n    root('a')\nexcept TypeError:\n    pass\nelse:\n    raise AssertionError('no TypeError')\nassert root(4) == 2.0\n",
        "",
    ),
    "floats with math.isclose": (
        "import math\ndef area(r):\n    return math.pi * r * r\n",
        AREA + "assert area(0.1) != 0.0314159\n",
        "",
    ),
    "exact floats": (
        "def special():\n    return [float('nan'), float('inf'), -float('inf'), -0.0, 0.1 + 0.2, 5e-324, 1.7976931348623157e308]\n",
        "import math\nv = special()\nassert math.isnan(v[0]) and v[1:3] == [math.inf, -math.inf]\n"
        "assert math.copysign(1.0, v[3]) == -1.0\nassert v[4] == 0.30000000000000004 and v[5] == 5e-324 and v[6] == 1.7976931348623157e308\n",
        "",
    ),
    "big ints": (
        "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\ndef power(b, e):\n    return b ** e\n",
        "import math\nassert fact(300) == math.factorial(300)\nassert power(-7, 12345) == (-7) ** 12345\nassert power(2, 100000) + 1 == 2 ** 100000 + 1\n",
        "",
    ),
    "recursion": (
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n",
        "assert depth(900) == 900\n",
        "",
    ),
    "nested plain data both ways": (
        "def echo(*args, **kwargs):\n    return args, kwargs\n",
        "value = {'a': (1, 2.5, None), b'\\x00k': [True, {1, 2}, frozenset({'z'})], 3: 1 + 2j, (1, ('x',)): 'caf\\u00e9 \\ud800'}\n"
        "args, kwargs = echo(value, [], (), b'', key=[{'deep': [[[]]]}])\n"
        "assert args == (value, [], (), b'') and kwargs == {'key': [{'deep': [[[]]]}]}\n"
        "assert type(args[0][b'\\x00k'][1]) is set and type(args[0][3]) is complex and type(args[0][b'\\x00k'][0]) is bool\n",
        "",
    ),
    "large lists of ints and floats, and lists of mixed types": (
        "def rev(xs):\n    return xs[::-1]\ndef same(x):\n    return x\n",
        "big = list(range(-50000, 50000))\nassert rev(big) == big[::-1]\n"
        "floats = tuple(i / 7 for i in range(1000)) + (float('inf'), -0.0)\nassert rev(floats) == floats[::-1]\n"
        "assert rev([10 ** 5000, 1]) == [1, 10 ** 5000]\n"
        "mixed = rev([1, True, 1.0, 2])\nassert [type(x) for x in mixed] == [int, float, bool, int]\n"
        "assert type(rev((1, 2))) is tuple and same({1, 2}) == {1, 2} and same(frozenset({0.5, 2.0})) == {0.5, 2.0}\n",
        "",
    ),
    "keyword arguments": (
        "def f(a, b=2, *, c=3):\n    return a * 100 + b * 10 + c\n",
        "assert f(1) == 123\nassert f(1, c=5, b=0) == 105\n",
        "",
    ),
    "the candidate's imports and values": (
        "import math\nLIMIT = 10\ndef area(r):\n    return math.pi * r * r\n",
        "assert math.isclose(area(1), math.pi)\nassert LIMIT == 10\n",
        "",
    ),
    "a candidate function passed back": (
        "def apply(f, x):\n    return f(x)\ndef double(x):\n    return 2 * x\n",
        "assert apply(double, 4) == 8\nassert double.__name__ == 'double'\n",
        "",
    ),
    "a __main__ block with argparse": (
        "import argparse\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    argparse.ArgumentParser().parse_args()\n    print(add(1, 2))\n",
        ADD,
        "",
    ),
    "a candidate's import of site or this does not run them in the judge": (
        "import site, this, math\ndef one():\n    return 1\n",
        "import sys\nassert one() == 1 and math.sqrt(4) == 2.0\n"
        "assert 'site' not in globals() and 'this' not in globals() and 'site' not in sys.modules\n",
        "",
    ),
    "the harness exits 0 itself": (
        "def add(a, b):\n    return a + b\n",
        "import sys\nassert add(1, 2) == 3\nsys.exit(0)\nassert False\n",
        "",
    ),
}


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_program_is_ac(verifier: Verifier, name: str) -> None:
    source, harness, stdin = RIGHT[name]
    r = verifier.run_program("python", source, harness=harness, stdin=stdin)
    assert r.status == "AC", r.tests[0].stderr if r.tests else r.message


def test_a_right_program_is_ac_through_the_controllers_scoring_path(verifier: Verifier) -> None:
    source, harness, _ = RIGHT["HumanEval style"]
    r = judge_one(verifier, VerifySample.asserts("ok", "python", source, harness))
    assert (r.status, r.score) == ("AC", 1.0), r


# --- failures keep their verdicts ----------------------------------------------------------------


def test_a_failed_assertion_is_wa_and_a_candidates_exception_re(verifier: Verifier) -> None:
    wrong = verifier.run_program("python", "def add(a, b):\n    return a - b\n", harness=ADD)
    assert wrong.status == "WA"
    assert "assert add(1, 2) == 3" in wrong.tests[0].stderr
    raises = verifier.run_program("python", "def add(a, b):\n    return {}[a]\n", harness=ADD)
    assert raises.status == "RE"
    assert "KeyError: 1" in raises.tests[0].stderr  # the candidate's exception, in the judge


def test_a_slow_candidate_is_tle_and_a_greedy_one_mle(verifier: Verifier) -> None:
    loop = verifier.run_program(
        "python", "def add(a, b):\n    while True:\n        pass\n", harness=ADD, time_limit_s=1.0
    )
    assert loop.status == "TLE", loop
    greedy = "def add(a, b):\n    x = []\n    while True:\n        x.append(bytearray(1 << 24))\n"
    r = verifier.run_program("python", greedy, harness=ADD, memory_mb=256)
    assert r.status == "MLE", r


# --- what the judge cannot see or use (README: assert style) ------------------------------------


def test_argument_mutation_is_not_seen_by_the_harness(verifier: Verifier) -> None:
    source = "def push(xs):\n    xs.append(1)\n"
    harness = "xs = []\nassert push(xs) is None\nassert xs == []\n"
    assert verifier.run_program("python", source, harness=harness).status == "AC"


def test_instances_and_functions_do_not_cross(verifier: Verifier) -> None:
    cls = "class Stack:\n    def __init__(self):\n        self.items = []\n"
    r = verifier.run_program("python", cls, harness="s = Stack()\nassert s.items == []\n")
    assert r.status == "RE" and "returned a __main__.Stack, not plain data" in r.tests[0].stderr
    gen = "def count(n):\n    yield from range(n)\n"
    r = verifier.run_program("python", gen, harness="assert list(count(3)) == [0, 1, 2]\n")
    assert r.status == "RE" and "generator" in r.tests[0].stderr
    apply = "def apply(f, x):\n    return f(x)\n"
    r = verifier.run_program("python", apply, harness="assert apply(lambda x: x, 1) == 1\n")
    assert r.status == "RE" and "apply() was given a builtins.function" in r.tests[0].stderr


def test_a_sandbox_python_of_another_bytecode_compiles_the_judge(
    verifier: Verifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    # code marshalled by a Python whose magic number the sandbox's does not have: code that
    # would exit 0 at once (AC for any candidate) if the entry point ran it anyway
    assert_python.compose("main.py", "", "")  # the judge's files made
    code = marshal.dumps(compile("import os\nos._exit(0)\n", "other", "exec")).hex()
    monkeypatch.setitem(assert_python._FILES, assert_python.JUDGE_CODE, f"00000000\n{code}")
    right = "def add(a, b):\n    return a + b  # compiled judge\n"
    assert verifier.run_program("python", right, harness=ADD).status == "AC"
    wrong = right.replace("a + b", "a - b")
    assert verifier.run_program("python", wrong, harness=ADD).status == "WA"


# A wrong candidate that looks for the tests wherever a process of its own could find them (the
# program's files, its stdin and every descriptor it holds, its environment, the judge's /proc)
# and, if it finds them, answers from them.
TEST_READER = r"""
import os, re, sys
def _find():
    texts = []
    for folder in ("/prog", "/tmp", "/proc/self/fd"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    os.lseek(f.fileno(), 0, os.SEEK_SET)
                    texts.append(f.read())
            except OSError:
                pass
    for path in (f"/proc/{os.getppid()}/cmdline", f"/proc/{os.getppid()}/environ", "/proc/self/environ"):
        try:
            with open(path, "rb") as f:
                texts.append(f.read())
        except OSError:
            pass
    texts.append(sys.stdin.buffer.read())
    for text in texts:
        found = re.search(rb"secret\((\d+)\) == (\d+)", text)
        if found:
            return {int(found.group(1)): int(found.group(2))}
    return {}
ANSWERS = _find()
def secret(x):
    return ANSWERS.get(x, -1)
"""


def test_the_candidate_cannot_read_the_tests(verifier: Verifier) -> None:
    harness = "assert secret(7) == 8675309\n"
    r = verifier.run_program("python", TEST_READER, harness=harness, stdin=b"data\n")
    assert r.status == "WA", (r.status, r.tests[0].stderr)
    # the candidate does get the test's own stdin, and nothing before it
    echo = "import sys\nDATA = sys.stdin.read()\ndef data():\n    return DATA\n"
    r = verifier.run_program(
        "python", echo, harness="assert data() == 'data\\n'\n", stdin=b"data\n"
    )
    assert r.status == "AC", (r.status, r.tests[0].stderr)
