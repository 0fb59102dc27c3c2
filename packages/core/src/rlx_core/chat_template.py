"""A chat template rendered with a bound on time and size, the same way on every call.

A checkpoint's chat template is code from whoever published the checkpoint. Jinja2's immutable
sandbox keeps it from reaching Python; this module keeps it from spinning or allocating without
end, and from rendering differently on each call (a resumed run must train on the prompts the run
it continues trained on):

- time: one rendering stops after `RENDER_TIMEOUT_S` seconds of wall clock (a watchdog thread
  raises into the rendering thread, which interrupts any loop of the template's code);
- size: every string, list or mapping a template builds (`~`, `+`, `*`, `%`, filters, method
  calls, `{% set %}` blocks) and the rendered output hold at most `MAX_CHARS` characters (a
  container at most `MAX_ITEMS` entries), and the operations that make a large value from a
  small one (`*`, `**`, `center`, `indent`, `join`, `replace`, `format` widths...) are checked
  before they run;
- `range` yields at most `MAX_RANGE` numbers;
- `|random` and `lipsum` (different on every call) are refused, naming the template.

Each refusal is an InvalidArgument naming the template's source and the bound it hit.

    template = BoundedTemplate(text, source="models/m", globals={"raise_exception": f})
    template.render(messages=[...], add_generation_prompt=True)
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from rlx_core.errors import InvalidArgument, RlxError

__all__ = ["MAX_CHARS", "MAX_ITEMS", "MAX_RANGE", "RENDER_TIMEOUT_S", "BoundedTemplate"]

RENDER_TIMEOUT_S = 2.0  # wall-clock seconds one rendering may take (a real template takes ms)
MAX_CHARS = 1 << 22  # characters (or items) in any value a template builds, and in its output
MAX_ITEMS = 1 << 16  # entries in any list, tuple, set or mapping a template builds
MAX_RANGE = 10_000  # numbers one `range(...)` of a template may yield
MAX_WIDTH = 10_000  # the largest width or precision in a format spec, `center`, `indent`...
MAX_INT_BITS = 1 << 16  # bits of an integer a template's `*` or `**` may make


class _Bound(Exception):
    """A template went past a bound; becomes an InvalidArgument naming the template."""


class _Timeout(BaseException):
    """Raised into the rendering thread by the watchdog (a BaseException, so that nothing on
    the template's side catches it)."""


def _weight(value: Any) -> int:
    """Characters and items in `value` (strings, bytes, lists, tuples, sets, mappings, nested),
    counted until the count passes MAX_CHARS (a container of more than MAX_ITEMS entries is over
    at once)."""
    total, stack = 0, [value]
    while stack and total <= MAX_CHARS:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v)
        elif isinstance(v, (Mapping, list, tuple, set, frozenset)):
            if len(v) > MAX_ITEMS:
                return MAX_CHARS + 1
            total += len(v)
            if isinstance(v, Mapping):
                stack.extend(v.keys())
                stack.extend(v.values())
            else:
                stack.extend(v)
        else:
            total += 1
    return total


def _checked(value: Any, what: str) -> Any:
    if _weight(value) > MAX_CHARS:
        raise _Bound(
            f"{what} makes a value of more than {MAX_CHARS} characters or {MAX_ITEMS} items"
        )
    return value


def _need(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise _Bound(
            f"{what} would make a value of {size} characters or items (at most {MAX_CHARS})"
        )


def _width(value: Any, what: str) -> None:
    if isinstance(value, int) and abs(value) > MAX_WIDTH:
        raise _Bound(f"{what}: width {value} (at most {MAX_WIDTH})")


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?([-#0 +]*)(\*|\d*)(?:\.(\*|\d*))?")


def _check_percent(fmt: str, what: str) -> None:
    """`fmt % args`: no `*` width, no width or precision over MAX_WIDTH."""
    for m in _PERCENT_SPEC.finditer(fmt):
        for part in m.groups()[1:]:
            if part == "*":
                raise _Bound(f"{what}: a '*' width in {fmt[:40]!r}")
            if part and int(part) > MAX_WIDTH:
                raise _Bound(f"{what}: width {part} (at most {MAX_WIDTH})")


def _check_format(fmt: str, what: str) -> None:
    """`fmt.format(...)`: no nested field in a spec, no width or precision over MAX_WIDTH."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _, _, spec, _ in fields:
        if not spec:
            continue
        if "{" in spec:
            raise _Bound(f"{what}: a nested field in the format spec {spec[:40]!r}")
        for digits in re.findall(r"\d+", spec):
            if int(digits) > MAX_WIDTH:
                raise _Bound(f"{what}: width {digits} (at most {MAX_WIDTH})")


def _replaced_size(s: Any, old: Any, new: Any) -> int:
    """The length of `s.replace(old, new)` at most (an empty `old` inserts `new` at every one of
    the len(s) + 1 positions)."""
    count = s.count(old) if old else len(s) + 1
    return len(s) + count * len(new)


def _check_str_call(name: str, s: str | bytes, args: tuple[Any, ...], kw: Mapping) -> None:
    """The string methods that can make a large string from a small one, checked first."""
    what = f"str.{name}"
    if name in ("center", "ljust", "rjust", "zfill"):
        _width(args[0] if args else kw.get("width"), what)
    elif name == "expandtabs":
        size = args[0] if args else kw.get("tabsize", 8)
        _width(size, what)
        if isinstance(size, int):
            _need(len(s) * max(size, 1), what)
    elif name == "join" and args:
        items = args[0] if isinstance(args[0], (str, bytes, list, tuple)) else list(args[0])
        _need(_weight(items) + len(s) * len(items), what)
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, type(s)) and isinstance(new, type(s)):
            _need(_replaced_size(s, old, new), what)
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((_weight(v) for v in args[0].values()), default=1)
        _need(len(s) * max(longest, 1), what)


def _check_binop(op: str, left: Any, right: Any) -> None:
    what = f"the operator {op!r}"
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int):
                _need(_weight(seq) * max(n, 0), what)
        ints = isinstance(left, int) and isinstance(right, int)
        if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise _Bound(f"{what} makes an integer of more than {MAX_INT_BITS} bits")
    elif op == "**":
        ints = isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
        if ints and max(left.bit_length() - 1, 1) * right > MAX_INT_BITS:
            raise _Bound(f"{what} makes an integer of more than {MAX_INT_BITS} bits")
    elif op == "+":
        if isinstance(left, (str, bytes, list, tuple)) and type(left) is type(right):
            _need(_weight(left) + _weight(right), what)
    elif op == "%" and isinstance(left, (str, bytes)):
        _check_percent(left if isinstance(left, str) else left.decode("latin-1"), what)


# filters checked before they run, by name: (checker of (value, args, kwargs))
def _f_width(name: str, pos: int, key: str) -> Callable[[Any, tuple, dict], None]:
    def check(value: Any, args: tuple, kw: dict) -> None:
        width = args[pos] if len(args) > pos else kw.get(key)
        _width(width, f"|{name}")
        if isinstance(width, str):
            _need(_weight(value) * (1 + len(width)), f"|{name}")

    return check


def _f_join(value: Any, args: tuple, kw: dict) -> None:
    sep = args[0] if args else kw.get("d", "")
    if isinstance(value, (str, bytes, list, tuple)):
        _need(_weight(value) + len(value) * _weight(sep), "|join")


def _f_replace(value: Any, args: tuple, kw: dict) -> None:
    if isinstance(value, str) and len(args) >= 2 and isinstance(args[0], str):
        _need(_replaced_size(value, args[0], str(args[1])), "|replace")


def _f_format(value: Any, args: tuple, kw: dict) -> None:
    if isinstance(value, str):
        _check_percent(value, "|format")


def _f_wordwrap(value: Any, args: tuple, kw: dict) -> None:
    wrap = args[2] if len(args) > 2 else kw.get("wrapstring")
    if isinstance(value, str) and isinstance(wrap, str):
        _need(len(value) * (1 + len(wrap)), "|wordwrap")


_FILTER_CHECKS: dict[str, Callable[[Any, tuple, dict], None]] = {
    "center": _f_width("center", 0, "width"),
    "indent": _f_width("indent", 0, "width"),
    "join": _f_join,
    "replace": _f_replace,
    "format": _f_format,
    "wordwrap": _f_wordwrap,
}


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    check = _FILTER_CHECKS.get(name)
    # the value filtered follows the context or environment a marked filter is given
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(fn)  # keeps jinja's pass_context / pass_environment marks
    def run(*args: Any, **kwargs: Any) -> Any:
        if check is not None and len(args) > skip:
            check(args[skip], args[skip + 1 :], kwargs)
        return _checked(fn(*args, **kwargs), f"|{name}")

    return run


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with `~` (string concatenation) through the environment's
    `rlx_concat`, which checks the size of what it makes."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:  # noqa: N802 (jinja's name)
        self.write("environment.rlx_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _join(pieces: Any) -> str:
    """`{% set x %}...{% endset %}` and `{% filter %}` blocks: their output, size checked."""
    out: list[str] = []
    size = 0
    for piece in pieces:
        size += len(piece)
        _need(size, "a block")
        out.append(piece)
    return "".join(out)


class _Environment(ImmutableSandboxedEnvironment):
    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "*", "**", "%"})
    concat = staticmethod(_join)

    def rlx_concat(self, values: tuple[Any, ...]) -> str:
        texts = [str(v) for v in values]
        _need(sum(len(t) for t in texts), "the operator '~'")
        return "".join(texts)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        return _checked(result, f"the operator {operator!r}")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes)):
            _check_str_call(getattr(__obj, "__name__", ""), owner, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, Namespace):
            return result
        return _checked(result, f"calling {getattr(__obj, '__name__', 'a function')}")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(fmt, f"str.{value.__name__}")
            return str(_checked(wrapped(*args, **kwargs), f"str.{value.__name__}"))

        return checked


def _range(*args: Any) -> Iterator[int]:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        shown = ", ".join(repr(a) for a in args)
        raise _Bound(f"range({shown}) has {len(numbers)} numbers (at most {MAX_RANGE})")
    return iter(numbers)


def _nondeterministic(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _Bound(
            f"it uses {name}, which renders differently on every call (a resumed run would "
            "train on other prompts); rlx does not offer it"
        )

    return refuse


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


class _Watchdog:
    """One daemon thread for the process that raises _Timeout into a thread whose rendering
    passed its deadline: `arm` before rendering, `disarm` after, which says whether it fired (a
    raise not yet delivered is withdrawn). One thread, not one per rendering: a dataset renders
    thousands of prompts."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A fresh state (a forked child has the lock as it was, and no watchdog thread)."""
        self._cond = threading.Condition()
        self._deadlines: dict[int, float] = {}  # thread ident -> time.monotonic() deadline
        self._fired: set[int] = set()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> None:
        ident = threading.get_ident()
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # first use, or a fork
                self._thread = threading.Thread(
                    target=self._watch, name="rlx-template-watchdog", daemon=True
                )
                self._thread.start()
            if ident in self._fired:  # a timeout raised before the last disarm could run
                self._fired.discard(ident)
                _set_async_exc(ident, ctypes.py_object())
            idle = not self._deadlines
            self._deadlines[ident] = time.monotonic() + seconds
            if idle:  # the watchdog waits without a timeout while nothing renders
                self._cond.notify()

    def disarm(self) -> bool:
        ident = threading.get_ident()
        with self._cond:
            self._deadlines.pop(ident, None)
            if ident not in self._fired:
                return False
            self._fired.discard(ident)
            _set_async_exc(ident, ctypes.py_object())  # withdraw it if not raised yet
            return True

    def _watch(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for ident in [i for i, d in self._deadlines.items() if d <= now]:
                    del self._deadlines[ident]
                    self._fired.add(ident)
                    _set_async_exc(ident, _Timeout)
                wait = min(self._deadlines.values()) - now if self._deadlines else None
                self._cond.wait(wait)


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG.reset)


class BoundedTemplate:
    """A chat template compiled in the bounded sandbox (see the module docstring)."""

    def __init__(
        self,
        text: str,
        *,
        source: str,
        globals: Mapping[str, Any] | None = None,
        filters: Mapping[str, Callable[..., Any]] | None = None,
        timeout_s: float = RENDER_TIMEOUT_S,
    ) -> None:
        self.source = source
        self.timeout_s = timeout_s
        env = _Environment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters.update(filters or {})
        env.filters["random"] = _nondeterministic("|random")
        env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
        env.globals.update(globals or {})
        env.globals["range"] = _range
        env.globals["lipsum"] = _nondeterministic("lipsum")
        try:
            self._template = env.from_string(text)
        except Exception as e:  # jinja2's TemplateSyntaxError and kin
            raise InvalidArgument(f"{source}: chat template does not parse: {e}") from None

    def render(self, **variables: Any) -> str:
        """The template's output; InvalidArgument naming the template when it fails or goes
        past a bound. An RlxError the template raises (its `raise_exception`) passes through."""
        _WATCHDOG.arm(self.timeout_s)
        try:
            try:
                out: list[str] = []
                size = 0
                for piece in self._template.generate(**variables):
                    size += len(piece)
                    if size > MAX_CHARS:
                        raise _Bound(f"its output passes {MAX_CHARS} characters")
                    out.append(piece)
            finally:
                fired = _WATCHDOG.disarm()
            if fired:
                raise _Timeout
        except _Timeout:
            raise InvalidArgument(
                f"{self.source}: chat template stopped: it ran past {self.timeout_s:g} s"
            ) from None
        except _Bound as e:
            raise InvalidArgument(f"{self.source}: chat template refused: {e}") from None
        except RlxError:
            raise
        except (MemoryError, RecursionError) as e:
            raise InvalidArgument(
                f"{self.source}: chat template refused: {type(e).__name__}"
            ) from None
        except Exception as e:  # an error inside the template (undefined name, bad index)
            raise InvalidArgument(f"{self.source}: chat template failed: {e}") from None
        return "".join(out)
