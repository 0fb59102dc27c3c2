"""Assert-style Python: the candidate runs in a process of its own and only plain data crosses
back to the judge, the one process that decides the verdict.

`compose` gives the files of one assert-style Python program: an entry point that runs this very
module (its code object, or its source), the candidate's source and the harness. Run as a script
(`python3 -I -S -B main.py`) this module is the **judge**, the sandboxed run's top process:

1. it starts the **candidate** process, `python3 -I -S -B main.py serve`, with stdin, stdout and
   stderr inherited and a pair of pipes on fds 3 and 4, which compiles the candidate's source and
   waits;
2. it makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`): a process of its uid without
   CAP_SYS_PTRACE (the sandbox keeps none) can neither ptrace it nor open its /proc/PID/mem, fd
   or environ. Then it tells the candidate process to go on: that execs the candidate's source
   as `__main__`, reports its top-level names (plain values as values, callables and modules by
   name) and then serves calls: (name, args, kwargs) in, a result or an exception out;
3. it runs the harness in a fresh namespace of the candidate's plain values and, for each of its
   callables, a proxy that sends the call and returns the decoded result. The judge never
   imports, compiles or execs candidate text, and a candidate's name never shadows a builtin.

Only plain data crosses, either way: None, bool, int, float (exact, nan and inf included),
complex, str, bytes, list, tuple, dict, set and frozenset, nested at most MAX_DEPTH deep, in
messages of at most MAX_MESSAGE bytes, in a tagged text encoding (`encode`, `decode`) whose
decoder only slices text and calls int, float.fromhex and the container constructors. A result
that is not plain data (an object with its own `__eq__`, a subclass of int, a generator) makes the
call raise TypeError in the judge. An exception of the candidate's becomes the builtin exception
of that name (else a RuntimeError naming it); a SystemExit, KeyboardInterrupt or other
BaseException of the candidate's, or a candidate process that dies or breaks the protocol, fails
the run. The judge exits 0 only when the harness ran to its end (or exited with status 0 itself);
a candidate killed by a signal (SIGXCPU: its CPU limit) takes the judge down with that signal.

As a script this file imports nothing at start but builtins, os, _signal and sys (each import is
start-up time of both processes).
"""

from __future__ import annotations

import builtins
import os
import sys

# _signal, not signal: that one imports enum, start-up time of both processes
signal = __import__("_signal")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO, NoReturn

__all__ = [
    "CANDIDATE",
    "HARNESS",
    "MAX_DEPTH",
    "MAX_MESSAGE",
    "compose",
    "decode",
    "encode",
    "judge_input",
]

CANDIDATE = "rlx_candidate.py"  # the candidate's source, next to the entry point
HARNESS = "rlx_harness.py"  # the tests' name in tracebacks (they come on stdin, in no file)
JUDGE_SOURCE = "rlx_judge.py"  # this module's source
JUDGE_CODE = "rlx_judge.code"  # its code object, marshalled
MAX_DEPTH = 100  # containers nested deeper are not plain data
MAX_MESSAGE = 32 << 20  # bytes of one message (the names, a call or a reply)
MAX_VALUE = 1 << 20  # characters of one top-level value the candidate reports (larger: left out)
MAX_TEXT = 2000  # characters of an exception's message kept
CALLS_FD, REPLIES_FD = 3, 4  # the candidate process's ends of the two pipes
PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
# Standard-library modules a candidate's `import NAME` does not bring into the harness: importing
# them acts (site: adds site-packages to sys.path and runs .pth files; others open a browser,
# print, start a GUI).
NOT_IMPORTED = frozenset(
    {"__hello__", "__phello__", "antigravity", "idlelib", "site", "this", "tkinter", "turtle"}
    | {"turtledemo", "webbrowser"}
)


# The entry point runs this module's code object as the verifier's Python marshalled it (JUDGE_CODE:
# the magic number, a newline, the hex of the code) when the sandbox's Python reads the same
# bytecode, else compiles its source (JUDGE_SOURCE): compiling this file costs about as much as
# starting the interpreter, in each of the two processes.
_ENTRY = """folder = __file__.rpartition("/")[0] or "."
try:
    from _frozen_importlib_external import MAGIC_NUMBER
    import marshal
    with open(folder + "/{code_file}") as f:
        magic, _, text = f.read().partition("\\n")
    code = marshal.loads(bytes.fromhex(text)) if magic == MAGIC_NUMBER.hex() else None
except Exception:
    code = None
if code is None:
    with open(folder + "/{source_file}", "rb") as f:
        code = compile(f.read(), "{source_file}", "exec", dont_inherit=True)
exec(code, {{"__name__": "__main__", "__builtins__": __builtins__}})
"""
_FILES: dict[str, str] = {}  # the judge's files, made once


def compose(entry: str, candidate: str, harness: str) -> dict[str, str]:
    """The files of one assert-style Python program ({file name: text}): `entry` (what the
    language runs) starts this module, the judge."""
    if not _FILES:
        import marshal
        from importlib.util import MAGIC_NUMBER

        with open(__file__, encoding="utf-8") as f:
            source = f.read()
        code = compile(source, JUDGE_SOURCE, "exec", dont_inherit=True, optimize=0)
        _FILES[JUDGE_CODE] = f"{MAGIC_NUMBER.hex()}\n{marshal.dumps(code).hex()}"
        _FILES[JUDGE_SOURCE] = source
    entry_text = _ENTRY.format(code_file=JUDGE_CODE, source_file=JUDGE_SOURCE)
    return {entry: entry_text, **_FILES, CANDIDATE: candidate}


def judge_input(harness: str, stdin: bytes) -> bytes:
    """The program's stdin: the harness (its length in bytes, a newline, its text), then the
    test's own stdin. The harness is in no file the candidate could read: the judge takes it from
    stdin before the candidate's process starts and hands that process only the rest."""
    data = harness.encode("utf-8", "surrogatepass")
    return b"%d\n" % len(data) + data + stdin


def _take_harness() -> bytes:
    """The harness from the head of stdin (see `judge_input`); the rest of stdin moves to a fresh
    memfd on fd 0, so that neither seeking back nor /proc/self/fd/0 reaches the harness."""
    chunks = []
    while chunk := os.read(0, 1 << 20):
        chunks.append(chunk)
    data = b"".join(chunks)
    head, newline, rest = data.partition(b"\n")
    if not newline or not head.isdigit() or int(head) > len(rest):
        _stop("the judge's stdin does not start with the harness")
    size = int(head)
    fd = os.memfd_create("stdin")
    view = memoryview(rest)[size:]
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    return rest[:size]


# --- plain data --------------------------------------------------------------------------------
# N None, T/F a bool, i<hex>; an int, f<float.hex>; a float, c<hex>,<hex>; a complex, y<hex>; bytes,
# s<n>:<n characters> a str, l/t/S/e/d<n>:<items> a list/tuple/set/frozenset/dict (a dict's items
# are its keys and values in turn), p<n>:<name> a callable passed by name, V... (below) a vector.


class NotPlain(TypeError):
    """A value that is not plain data; the message says what it is."""


_CONTAINERS: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "e", dict: "d"}
_BUILD: dict[str, Callable[[list[Any]], object]] = {
    "l": list,
    "t": tuple,
    "S": set,
    "e": frozenset,
    "d": lambda items: dict(zip(items[::2], items[1::2], strict=True)),
}
_SCALARS: dict[type, tuple[str, Callable[[Any], str]]] = {
    int: ("i", lambda v: format(v, "x")),  # hex: no digit limit either way
    float: ("f", float.hex),
    complex: ("c", lambda v: f"{v.real.hex()},{v.imag.hex()}"),
    bytes: ("y", bytes.hex),
}
_PARSE: dict[str, Callable[[str], object]] = {
    "i": lambda s: int(s, 16),
    "f": float.fromhex,
    "c": lambda s: complex(*map(float.fromhex, s.split(",", 1))),
    "y": bytes.fromhex,
}
_CONSTANTS = {"N": None, "T": True, "F": False}
# A container of ints only or floats only, the bulk of large test data, in one piece (C-speed
# joins and maps both ways): V<container tag><i|f><decimal ints or float.hex, comma-separated>;
_VECTORS: dict[type, tuple[str, Callable[[Any], str]]] = {int: ("i", str), float: ("f", float.hex)}
_VECTOR_PARSE: dict[str, Callable[[str], object]] = {"i": int, "f": float.fromhex}


def encode(value: object, refs: dict[int, str] | None = None) -> str:
    """The text of plain data; NotPlain for anything else. `refs`: objects passed by name."""
    out: list[str] = []
    _encode(value, out, 0, refs)
    return "".join(out)


def _encode(value: object, out: list[str], depth: int, refs: dict[int, str] | None) -> None:
    t = type(value)
    if value is None or t is bool:
        out.append("N" if value is None else "T" if value else "F")
    elif type(value) is str:  # not `t is str`: mypy narrows `value` only this way
        out += ("s", str(len(value)), ":", value)
    elif t in _SCALARS:
        tag, text = _SCALARS[t]
        out += (tag, text(value), ";")
    elif refs is not None and id(value) in refs:
        name = refs[id(value)]
        out += ("p", str(len(name)), ":", name)
    elif t in _CONTAINERS:
        if depth >= MAX_DEPTH:
            raise NotPlain(f"data nested deeper than {MAX_DEPTH} levels")
        items: Any = value
        if t is not dict and len(items) > 1 and _vector(t, items, out):
            return
        out += (_CONTAINERS[t], str(len(items)), ":")
        for item in items.items() if t is dict else items:
            for part in item if t is dict else (item,):
                _encode(part, out, depth + 1, refs)
    else:
        raise NotPlain(f"a {t.__module__}.{t.__qualname__}")


def _vector(t: type, items: Any, out: list[str]) -> bool:
    """Whether `items` went out as a vector (all of them ints, or all floats)."""
    kinds = set(map(type, items))
    if len(kinds) != 1 or (kind := kinds.pop()) not in _VECTORS:
        return False
    tag, text = _VECTORS[kind]
    try:
        joined = ",".join(map(text, items))
    except ValueError:  # an int past str()'s digit limit: item by item, in hex
        return False
    out += ("V", _CONTAINERS[t], tag, joined, ";")
    return True


def decode(text: str, resolve: Callable[[str], object] | None = None) -> object:
    """The value `encode` gave `text` for; ValueError for anything else (text the decoder does
    not read to its end included). `resolve`: what a name passed by reference stands for."""
    try:
        value, end = _decode(text, 0, 0, resolve)
    except (LookupError, TypeError, OverflowError, RecursionError) as e:
        raise ValueError(f"malformed data ({type(e).__name__})") from None
    if end != len(text):
        raise ValueError("malformed data (trailing text)")
    return value


def _decode(
    text: str, i: int, depth: int, resolve: Callable[[str], object] | None
) -> tuple[object, int]:
    tag = text[i]
    if tag in _CONSTANTS:
        return _CONSTANTS[tag], i + 1
    if tag in _PARSE:
        end = text.index(";", i + 1)
        return _PARSE[tag](text[i + 1 : end]), end + 1
    if tag == "V":
        end = text.index(";", i + 3)
        if text[i + 1] == "d":
            raise ValueError("malformed data (a dict vector)")
        build, parse = _BUILD[text[i + 1]], _VECTOR_PARSE[text[i + 2]]
        return build(list(map(parse, text[i + 3 : end].split(",")))), end + 1
    colon = text.index(":", i + 1)
    n = int(text[i + 1 : colon])
    i = colon + 1
    if not 0 <= n <= len(text) - i or depth >= MAX_DEPTH:
        raise ValueError("malformed data (a length)")
    if tag == "s":
        return text[i : i + n], i + n
    if tag == "p" and resolve is not None:
        return resolve(text[i : i + n]), i + n
    if tag not in _BUILD:
        raise ValueError(f"malformed data (tag {tag!r})")
    items = []
    for _ in range(2 * n if tag == "d" else n):
        item, i = _decode(text, i, depth + 1, resolve)
        items.append(item)
    return _BUILD[tag](items), i


def _send(fd: int, message: tuple[object, ...], refs: dict[int, str] | None = None) -> None:
    data = encode(message, refs).encode("utf-8", "surrogatepass")
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a message over {MAX_MESSAGE} bytes")
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(stream: BinaryIO, resolve: Callable[[str], object] | None = None) -> object:
    """The next message; None at the end of the stream. ValueError: a malformed one."""
    head = stream.read(4)
    if not head:
        return None
    size = int.from_bytes(head, "big")
    if len(head) < 4 or size > MAX_MESSAGE:
        raise ValueError("a malformed message header")
    data = stream.read(size)
    if len(data) < size:
        raise ValueError("a message cut short")
    return decode(data.decode("utf-8", "surrogatepass"), resolve)


def _raised(e: BaseException) -> tuple[object, ...]:
    """("x", type name, args): the exception's own args when they are small plain data, else its
    message alone."""
    try:
        args = e.args
        if type(args) is tuple and len(encode(args)) <= MAX_TEXT:
            return ("x", type(e).__name__, args)
        return ("x", type(e).__name__, (str(e)[:MAX_TEXT],))
    except Exception:
        return ("x", type(e).__name__, ())


# --- the candidate's process -------------------------------------------------------------------


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - no contextlib: every import is start-up time
            stream.flush()
        except Exception:
            pass


def _names(namespace: dict[str, Any]) -> list[tuple[str, ...]]:
    """(name, "v", plain value text), (name, "f") or (name, "m") for each top-level name."""
    found: list[tuple[str, ...]] = []
    for name, value in list(namespace.items()):
        if type(name) is not str or name.startswith("__"):
            continue
        if type(value) is type(sys):
            if getattr(value, "__name__", None) == name:
                found.append((name, "m"))
        elif callable(value):
            found.append((name, "f"))
        else:
            try:
                data = encode(value)
            except NotPlain:
                continue
            if len(data) <= MAX_VALUE:
                found.append((name, "v", data))
    return found


def _answer(namespace: dict[str, Any], name: str, args: Any, kwargs: Any) -> tuple[object, ...]:
    """The reply to one call: ("r", result), ("n", what the result is) or ("x", type, args)."""
    try:
        fn = namespace[name]
    except KeyError:
        return ("x", "NameError", (f"name {name!r} is not defined",))
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:
        return _raised(e)
    try:
        encode(result)
    except NotPlain as e:
        return ("n", str(e))
    return ("r", result)


def _serve(folder: str) -> NoReturn:
    """The candidate's process: exec its source as `__main__`, report its names, serve calls."""
    os.set_inheritable(CALLS_FD, False)
    os.set_inheritable(REPLIES_FD, False)
    calls = os.fdopen(CALLS_FD, "rb")
    module = type(sys)("__main__")
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    namespace = module.__dict__
    path = os.path.join(folder, CANDIDATE)
    sys.argv = [path]  # as if the candidate were the script (argparse in a __main__ block)
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
        if _receive(calls) != ("go",):  # the judge is not non-dumpable yet, or gave up
            os._exit(1)
        exec(code, namespace)
    except BaseException as e:
        import traceback

        traceback.print_exception(e)
        _flush()
        _send(REPLIES_FD, _raised(e))
        os._exit(1)
    _flush()
    _send(REPLIES_FD, ("names", _names(namespace)))
    while True:
        message: Any = _receive(calls, namespace.__getitem__)
        if message is None:
            os._exit(0)
        if message[0] != "c":
            _flush()
            _send(REPLIES_FD, ("q",))
            os._exit(0)
        reply = _answer(namespace, *message[1:])
        _flush()
        try:
            _send(REPLIES_FD, reply)
        except ValueError as e:
            _send(REPLIES_FD, ("n", str(e)))


# --- the judge ---------------------------------------------------------------------------------


def _undumpable() -> str:
    """PR_SET_DUMPABLE 0, checked: "" once done, else why not."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0):
        return f"cannot make the judge non-dumpable: {os.strerror(ctypes.get_errno())}"
    return ""


def _stop(why: str, code: int = 3) -> NoReturn:
    os.write(2, f"rlx: {why}\n".encode(errors="replace"))
    os._exit(code)


class _Proxy:
    """Stands for one callable of the candidate's in the harness: calls it in its process."""

    def __init__(self, candidate: _Candidate, name: str) -> None:
        self._candidate = candidate
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._candidate.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__name__} of the candidate>"


class _Candidate:
    """The candidate's process as the judge sees it: its names, then calls in, plain data out."""

    def __init__(self, script: str) -> None:
        import _thread
        import fcntl

        self._lock = _thread.allocate_lock()  # one call at a time on the pipes
        calls_r, self._calls = os.pipe()
        replies, replies_w = os.pipe()
        # Its ends moved above fd 10 first, so that the dups onto 3 and 4 never overlap them.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (calls_r, replies_w)]
        os.close(calls_r)
        os.close(replies_w)
        python = sys.executable or "/usr/bin/python3"
        try:
            self.pid = os.posix_spawn(
                python,
                [python, "-I", "-S", "-B", script, "serve"],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, ends[0], CALLS_FD),
                    (os.POSIX_SPAWN_DUP2, ends[1], REPLIES_FD),
                ],
            )
        except OSError as e:
            _stop(f"cannot start the candidate's process: {e}")
        finally:
            for fd in ends:
                os.close(fd)
        self._replies = os.fdopen(replies, "rb")
        self.proxies: dict[int, str] = {}  # id(proxy): name, for proxies passed as arguments

    def go(self) -> None:
        """Let the candidate's code run."""
        try:
            _send(self._calls, ("go",))
        except OSError:
            self.gone()

    def receive(self) -> tuple[Any, ...]:
        try:
            message = _receive(self._replies)
        except (OSError, ValueError) as e:
            self.fail(f"the candidate's process sent malformed data: {e}")
        if message is None:
            self.gone()
        if type(message) is not tuple or not message or type(message[0]) is not str:
            self.fail("the candidate's process sent malformed data")
        return message

    def names(self) -> dict[str, object]:
        """The harness's namespace: the candidate's plain values, proxies and modules."""
        message = self.receive()
        if message[0] == "x" and len(message) == 3:
            self.fail(f"the candidate's code raised {message[1]} before the tests", code=1)
        if message[:1] != ("names",) or len(message) != 2 or type(message[1]) is not list:
            self.fail("the candidate's process sent malformed data")
        stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
        namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
        for item in message[1]:
            if type(item) is not tuple or not item or type(item[0]) is not str:
                self.fail("the candidate's process sent malformed data")
            name, kind = item[0], item[1:]
            if not name.isidentifier() or name.startswith("__") or name in vars(builtins):
                continue  # a candidate's `abs` or `__builtins__` never replaces the harness's
            if kind == ("f",):
                proxy = _Proxy(self, name)
                namespace[name] = proxy
                self.proxies[id(proxy)] = name
            elif len(kind) == 2 and kind[0] == "v" and type(kind[1]) is str:
                try:
                    namespace[name] = decode(kind[1])
                except ValueError:
                    self.fail("the candidate's process sent malformed data")
            elif kind == ("m",) and name in stdlib and name not in NOT_IMPORTED:
                import importlib

                try:  # noqa: SIM105
                    namespace[name] = importlib.import_module(name)
                except ImportError:  # not in this Python
                    pass
        return namespace

    def call(self, name: str, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        with self._lock:
            try:
                _send(self._calls, ("c", name, args, kwargs), self.proxies)
            except NotPlain as e:
                raise TypeError(f"rlx: {name}() was given {e}: only plain data crosses") from None
            except ValueError as e:
                raise TypeError(f"rlx: {name}() was given {e}") from None
            except OSError:
                self.gone()
            reply = self.receive()
        tag = reply[0]
        if tag == "r" and len(reply) == 2:
            return reply[1]
        if tag == "n" and len(reply) == 2 and type(reply[1]) is str:
            raise TypeError(f"rlx: {name}() returned {reply[1][:MAX_TEXT]}, not plain data")
        if tag == "x" and len(reply) == 3 and type(reply[1]) is str and type(reply[2]) is tuple:
            raise self.exception(reply[1], reply[2])
        self.fail("the candidate's process sent malformed data")

    def exception(self, name: str, args: tuple[object, ...]) -> Exception:
        """The builtin exception `name` (an Exception) with `args`, else a RuntimeError naming
        it; a BaseException that is not an Exception (SystemExit...) fails the run."""
        cls = vars(builtins).get(name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            if not issubclass(cls, Exception):
                self.fail(f"the candidate raised {name} in a call", code=1)
            try:
                return cls(*args)
            except Exception:
                pass
        text = ", ".join(map(repr, args))[:MAX_TEXT]
        return RuntimeError(f"the candidate raised {name[:100]}: {text}")

    def close(self) -> None:
        """Ask the candidate's process to flush its output and leave (1 s at most), then kill it."""
        import select

        try:
            _send(self._calls, ("q",))
            if select.select([self._replies], [], [], 1.0)[0]:
                self._replies.read(1)
        except (OSError, ValueError):
            pass
        self._kill()

    def _kill(self) -> int:
        try:  # noqa: SIM105
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return os.waitpid(self.pid, 0)[1]

    def gone(self) -> NoReturn:
        """The candidate's process closed its pipe: a failure, or its signal (SIGXCPU: TLE)."""
        status = self._kill()
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
            sig = os.WTERMSIG(status)
            os.write(2, f"rlx: the candidate's process died of signal {sig}\n".encode())
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        _stop(f"the candidate's process ended (wait status {status}) before the tests", code=1)

    def fail(self, why: str, code: int = 3) -> NoReturn:
        self._kill()
        _stop(why, code)


def _judge(script: str) -> None:
    # The candidate's process starts first (its interpreter's start overlaps ctypes' import
    # here) but runs no candidate code before "go", sent once this process is non-dumpable.
    source = _take_harness()
    candidate = _Candidate(script)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # never a KeyboardInterrupt in the harness
    why = _undumpable()
    if why:
        candidate.fail(why)
    candidate.go()
    harness = compile(source, HARNESS, "exec")
    # its lines for tracebacks (a failed assertion names its line), as if read from a file
    import linecache

    text = source.decode("utf-8", "replace")
    linecache.cache[HARNESS] = (len(text), None, text.splitlines(True), HARNESS)
    del source
    namespace = candidate.names()
    try:
        exec(harness, namespace)
    except SystemExit as e:
        candidate.close()
        if e.code is not None and e.code != 0:
            raise
    except BaseException as e:
        candidate.close()
        # printed here, not by the interpreter's hook: that one reads source lines from files,
        # and the harness is in none (linecache has its lines)
        try:
            import traceback

            traceback.print_exception(e)
        except BaseException:
            os.write(2, f"{type(e).__name__}\n".encode())
        _flush()
        os._exit(1)
    else:
        candidate.close()
    sys.stdout.flush()  # (raises if the output cannot be written: not a pass)
    sys.stderr.flush()
    os._exit(0)  # the interpreter's own shutdown costs milliseconds and decides nothing


def main() -> None:
    script = os.path.abspath(sys.argv[0])
    if sys.argv[1:] == ["serve"]:
        _serve(os.path.dirname(script))
    _judge(script)


if __name__ == "__main__":
    main()
