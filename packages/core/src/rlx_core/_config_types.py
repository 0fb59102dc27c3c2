"""The annotation nodes behind `rlx_core.config`: how each supported field type is checked,
built from plain TOML data, dumped back to it, and walked by dotted override paths.

A config class is read once into a tuple of `FieldSpec`s (`schema`), each holding a `Node` parsed
from the field's annotation. Unsupported annotations fail there with `TypeError`: a programming
error in the config class, not a user error. User data that does not fit raises `ConfigError`
naming the dotted path (`trainer.optim.lr`, `datasets[2].weight`), the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePath
from typing import Any, Literal, Union, get_args, get_origin

from rlx_core.configs.checks import suggest
from rlx_core.errors import ConfigError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_TOML_SCALARS = (str, int, float, bool)


def join_key(path: str, key: str) -> str:
    """`path.key`, quoting the key as TOML does when it is not a bare key."""
    part = key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)
    return f"{path}.{part}" if path else part


def join_index(path: str, index: int) -> str:
    """`path[index]`."""
    return f"{path}[{index}]"


def show(value: Any) -> str:
    """`repr(value)`, cut to a length that fits in one message line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_error(path: str, value: Any, expected: str, hint: str = "") -> ConfigError:
    """The ConfigError for a value that does not fit: `path: expected X, got V[; hint]`."""
    message = f"expected {expected}, got {show(value)}"
    text = f"{message}; {hint}" if hint else message
    return ConfigError(text, field=path, value=value, allowed=expected)


def _literal_text(value: Any) -> str:
    """A literal as written in TOML (`true`, `'x'`, `3`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class Node:
    """One supported annotation. `build` checks and converts plain data; `dump` reverses it."""

    name: str = "?"  # the type as shown by `describe`, e.g. `tuple[int, ...]`
    expected: str = "?"  # what is allowed, as read in messages, e.g. `an integer`

    def build(self, value: Any, path: str) -> Any:
        """The field value for plain `value` found at `path`, or ConfigError."""
        raise NotImplementedError

    def dump(self, value: Any) -> Any:
        """The plain, TOML-able form of a field value (never called with None)."""
        return value

    def child(self, part: str | int, path: str) -> Node:
        """The node one step below this one along an override path."""
        raise ConfigError(f"cannot go below {self.expected} into {part!r}", field=path)

    def children(self) -> tuple[Node, ...]:
        """The nodes directly inside this one (element types)."""
        return ()

    def unwrap(self) -> Node:
        """This node without an `| None`."""
        return self


class _Scalar(Node):
    kind: type = object

    def build(self, value: Any, path: str) -> Any:
        if isinstance(value, self.kind) and not (self.kind is not bool and isinstance(value, bool)):
            return value
        raise type_error(path, value, self.expected)


class BoolNode(_Scalar):
    """`bool`: only real booleans, never 0/1 or "true"."""

    kind, name, expected = bool, "bool", "a boolean (true or false)"


class IntNode(_Scalar):
    """`int`: integers, not booleans, not floats (even 2.0)."""

    kind, name, expected = int, "int", "an integer"


class StrNode(_Scalar):
    """`str`."""

    kind, name, expected = str, "str", "a string"


class FloatNode(Node):
    """`float`: floats, and integers converted to float; not booleans."""

    name, expected = "float", "a number (float)"

    def build(self, value: Any, path: str) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise type_error(path, value, "a number within float range") from None
        raise type_error(path, value, self.expected)

    def dump(self, value: Any) -> Any:
        return float(value)


class PathNode(Node):
    """`pathlib.Path` (or another PurePath class): written as a string."""

    def __init__(self, cls: type[PurePath]) -> None:
        self.cls = cls
        self.name, self.expected = "path", "a path (string)"

    def build(self, value: Any, path: str) -> Any:
        if isinstance(value, (str, PurePath)):
            return self.cls(value)
        raise type_error(path, value, self.expected)

    def dump(self, value: Any) -> Any:
        return str(value)


class LiteralNode(Node):
    """`Literal[...]` of strings, integers or booleans: the value must be one of them."""

    def __init__(self, values: tuple[Any, ...]) -> None:
        for v in values:
            if not isinstance(v, (str, int)):
                raise TypeError(f"Literal values must be str, int or bool, not {v!r}")
        self.values = values
        self.name = " | ".join(_literal_text(v) for v in values)
        self.expected = "one of " + self.name if len(values) > 1 else self.name

    def build(self, value: Any, path: str) -> Any:
        for v in self.values:
            if type(v) is type(value) and v == value:
                return v
        words = [v for v in self.values if isinstance(v, str)]
        hint = suggest(value, words) if isinstance(value, str) else ""
        raise type_error(path, value, self.expected, hint)


class EnumNode(Node):
    """An `enum.Enum` subclass: a member's value (preferred, and what is dumped) or its name."""

    def __init__(self, cls: type[enum.Enum]) -> None:
        if not list(cls):
            raise TypeError(f"enum {cls.__qualname__} has no members")
        self.cls = cls
        self.name = cls.__name__
        self.expected = "one of " + " | ".join(_literal_text(self.dump(m)) for m in cls)

    def build(self, value: Any, path: str) -> Any:
        if isinstance(value, self.cls):
            return value
        for member in self.cls:
            if type(member.value) is type(value) and member.value == value:
                return member
        if isinstance(value, str) and value in self.cls.__members__:
            return self.cls.__members__[value]
        words = [str(self.dump(m)) for m in self.cls]
        hint = suggest(value, words) if isinstance(value, str) else ""
        raise type_error(path, value, f"{self.expected} ({self.cls.__name__})", hint)

    def dump(self, value: Any) -> Any:
        return value.value if isinstance(value.value, _TOML_SCALARS) else value.name


class OptionalNode(Node):
    """`X | None` as a whole field type, defaulting to None: absent from TOML means None."""

    def __init__(self, inner: Node) -> None:
        self.inner = inner
        self.name = f"{inner.name} | None"
        self.expected = inner.expected

    def build(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.build(value, path)

    def dump(self, value: Any) -> Any:
        return self.inner.dump(value)

    def child(self, part: str | int, path: str) -> Node:
        return self.inner.child(part, path)

    def children(self) -> tuple[Node, ...]:
        return (self.inner,)

    def unwrap(self) -> Node:
        return self.inner


def _check_array(value: Any, path: str, expected: str) -> list[Any] | tuple[Any, ...]:
    if isinstance(value, (list, tuple)):
        return value
    raise type_error(path, value, expected)


class SeqNode(Node):
    """`tuple[X, ...]` or `list[X]`: a TOML array, built as the annotated container."""

    def __init__(self, inner: Node, container: type) -> None:
        self.inner, self.container = inner, container
        self.name = f"tuple[{inner.name}, ...]" if container is tuple else f"list[{inner.name}]"
        self.expected = f"an array of {inner.name}"

    def build(self, value: Any, path: str) -> Any:
        items = _check_array(value, path, self.expected)
        return self.container(self.inner.build(v, join_index(path, i)) for i, v in enumerate(items))

    def dump(self, value: Any) -> Any:
        return [self.inner.dump(v) for v in value]

    def child(self, part: str | int, path: str) -> Node:
        if isinstance(part, int):
            return self.inner
        return super().child(part, path)

    def children(self) -> tuple[Node, ...]:
        return (self.inner,)


class FixedTupleNode(Node):
    """`tuple[X, Y, ...]` of fixed length: a TOML array of exactly that many items."""

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        self.name = "tuple[" + ", ".join(n.name for n in items) + "]"
        self.expected = f"an array of {len(items)} items ({', '.join(n.name for n in items)})"

    def build(self, value: Any, path: str) -> Any:
        items = _check_array(value, path, self.expected)
        if len(items) != len(self.items):
            raise type_error(path, value, self.expected)
        pairs = zip(self.items, items, strict=True)
        return tuple(n.build(v, join_index(path, i)) for i, (n, v) in enumerate(pairs))

    def dump(self, value: Any) -> Any:
        return [n.dump(v) for n, v in zip(self.items, value, strict=True)]

    def child(self, part: str | int, path: str) -> Node:
        if isinstance(part, int) and part < len(self.items):
            return self.items[part]
        return super().child(part, path)

    def children(self) -> tuple[Node, ...]:
        return self.items


class DictNode(Node):
    """`dict[str, X]`: a TOML table with free keys."""

    def __init__(self, inner: Node) -> None:
        self.inner = inner
        self.name = f"dict[str, {inner.name}]"
        self.expected = f"a table of {inner.name}"

    def build(self, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise type_error(path, value, self.expected)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise type_error(path, k, "string keys")
            out[k] = self.inner.build(v, join_key(path, k))
        return out

    def dump(self, value: Any) -> Any:
        return {k: self.inner.dump(v) for k, v in value.items()}

    def child(self, part: str | int, path: str) -> Node:
        if isinstance(part, str):
            return self.inner
        return super().child(part, path)

    def children(self) -> tuple[Node, ...]:
        return (self.inner,)


class ConfigNode(Node):
    """A nested config dataclass: a TOML table (or an instance of the class, passed through)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__name__
        self.expected = f"a table ({cls.__name__})"

    def build(self, value: Any, path: str) -> Any:
        if isinstance(value, self.cls):
            return value
        if not isinstance(value, Mapping):
            raise type_error(path, value, self.expected)
        return build_config(self.cls, value, path)

    def dump(self, value: Any) -> Any:
        return config_to_dict(value)

    def child(self, part: str | int, path: str) -> Node:
        specs = {s.name: s for s in schema(self.cls)}
        if isinstance(part, str) and part in specs:
            return specs[part].node
        raise unknown_field(join_key(path, str(part)), str(part), specs, moved_fields(self.cls))


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One init field of a config class, with its parsed type."""

    name: str
    node: Node
    default: Any  # dataclasses.MISSING when there is none
    factory: Callable[[], Any] | Any  # dataclasses.MISSING when there is none
    doc: str  # from `config_field(doc=...)`, else the field's trailing source comment, or ""
    merge: bool = False  # a table given for it sets fields of its default (`config_field(merge=)`)

    @property
    def required(self) -> bool:
        """True when the field has neither a default nor a default factory."""
        return self.default is dataclasses.MISSING and self.factory is dataclasses.MISSING

    def default_value(self) -> Any:
        """The field's default (its factory called); the field must not be required."""
        return self.default if self.factory is dataclasses.MISSING else self.factory()


def parse_type(tp: Any, *, top: bool = False) -> Node:
    """The node for annotation `tp`; TypeError when rlx configs do not support it.

    `top` is true for a whole field type, the only place `X | None` is allowed."""
    if isinstance(tp, type) and get_origin(tp) is None:
        node = _parse_class(tp)
    else:
        node = _parse_generic(tp, top)
    if node is None:
        raise TypeError(f"unsupported config field type {tp!r}")
    return node


def _parse_class(tp: type) -> Node | None:
    simple: dict[type, type[Node]] = {bool: BoolNode, int: IntNode, float: FloatNode, str: StrNode}
    if tp in simple:
        return simple[tp]()
    if issubclass(tp, PurePath):
        return PathNode(tp)
    if issubclass(tp, enum.Enum):
        return EnumNode(tp)
    return ConfigNode(tp) if dataclasses.is_dataclass(tp) else None


def _parse_generic(tp: Any, top: bool) -> Node | None:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return LiteralNode(args)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if not top or len(rest) != 1 or len(args) != 2:
            raise TypeError(f"unsupported union {tp!r}: only `X | None` as a whole field type")
        return OptionalNode(parse_type(rest[0]))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return SeqNode(parse_type(args[0]), tuple)
    if origin is tuple and args and Ellipsis not in args:
        return FixedTupleNode(tuple(parse_type(a) for a in args))
    is_list = origin is list and len(args) == 1
    if is_list or (origin is dict and len(args) == 2 and args[0] is str):
        inner = parse_type(args[-1])
        return SeqNode(inner, list) if is_list else DictNode(inner)
    return None


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for c in node.children():
        yield from _walk(c)


def source_comments(cls: type) -> dict[str, str]:
    """The trailing `# comment` of each field line in the source of `cls` (the house style puts
    units and valid values there), used as the doc of fields without `config_field(doc=...)`.
    Empty when the source cannot be read."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return {}
    docs: dict[str, str] = {}
    depth = 0  # INDENT depth: 1 is the class body
    line: list[tokenize.TokenInfo] = []  # the tokens of the current logical line
    for tok in tokens:
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type == tokenize.NEWLINE:
            names = [t for t in line if t.type != tokenize.COMMENT]
            comments = [t.string for t in line if t.type == tokenize.COMMENT]
            is_field = len(names) > 1 and names[0].type == tokenize.NAME and names[1].string == ":"
            if depth == 1 and is_field and comments:
                docs[names[0].string] = comments[0].lstrip("#").strip()
            line = []
        elif tok.type not in (tokenize.NL, tokenize.ENCODING):
            line.append(tok)
    return docs


_SCHEMAS: dict[type, tuple[FieldSpec, ...]] = {}


def schema(cls: type) -> tuple[FieldSpec, ...]:
    """The init fields of config class `cls`, checked (with every nested config class) once."""
    cached = _SCHEMAS.get(cls)
    if cached is not None:
        return cached
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    try:
        hints = typing.get_type_hints(cls)
    except NameError as e:
        raise TypeError(
            f"{cls.__qualname__}: cannot resolve an annotation ({e}); config classes and the "
            "types they use must be importable from their module, not local to a function"
        ) from None
    specs = []
    comments = source_comments(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        where = f"{cls.__qualname__}.{f.name}"
        try:
            node = parse_type(hints[f.name], top=True)
        except TypeError as e:
            raise TypeError(f"{where}: {e}") from None
        if isinstance(node, OptionalNode) and f.default is not None:
            raise TypeError(
                f"{where}: an `X | None` field must default to None, since TOML cannot write "
                "None; give it a plain type if it always has a value"
            )
        doc = str(f.metadata.get("doc", "")) or comments.get(f.name, "")
        merge = bool(f.metadata.get("merge", False))
        has_default = f.default is not dataclasses.MISSING
        if merge and not (
            isinstance(node, ConfigNode)
            and (has_default or f.default_factory is not dataclasses.MISSING)
        ):
            raise TypeError(f"{where}: merge needs a config-class field with a default")
        specs.append(FieldSpec(f.name, node, f.default, f.default_factory, doc, merge))
    result = tuple(specs)
    _SCHEMAS[cls] = result  # before the children, so that recursive configs terminate
    try:
        for spec in result:
            for n in _walk(spec.node):
                if isinstance(n, ConfigNode):
                    schema(n.cls)
    except TypeError:
        del _SCHEMAS[cls]
        raise
    return result


def moved_fields(cls: type) -> Mapping[str, str]:
    """The retired keys of config class `cls` and where each went: its `MOVED_FIELDS` class
    variable (`{"algorithm": "[algorithm] moved to [trainer.objective] ..."}`), or none."""
    moved = getattr(cls, "MOVED_FIELDS", None)
    return moved if isinstance(moved, Mapping) else {}


def unknown_field(
    path: str, key: str, specs: Mapping[str, FieldSpec], moved: Mapping[str, str] | None = None
) -> ConfigError:
    """The ConfigError for key `key` that the config at `path`'s parent does not have; a key in
    `moved` (the parent's `moved_fields`) gets its message, which says where the field went."""
    if moved and key in moved:
        return ConfigError(moved[key], field=path, value=key, allowed=", ".join(specs))
    hint = suggest(key, specs) or "valid fields: " + (", ".join(specs) or "none")
    return ConfigError(f"unknown field; {hint}", field=path, value=key, allowed=", ".join(specs))


def _reroot(error: ConfigError, path: str) -> ConfigError:
    """`error` raised by the `__post_init__` of the config at `path`, with the full dotted path."""
    field = error.field
    message = error.message
    if field and message.startswith(f"{field}: "):
        message = message[len(field) + 2 :]
    if not field:
        full = path
    elif field.startswith("["):
        full = path + field
    else:
        full = f"{path}.{field}"
    return ConfigError(message, field=full, value=error.value, allowed=error.allowed)


def build_config(cls: type, data: Mapping[str, Any], path: str) -> Any:
    """Config `cls` from table `data` found at `path`, checked field by field in declaration
    order after unknown keys; the first problem raises ConfigError."""
    specs = {s.name: s for s in schema(cls)}
    for key in data:
        if not isinstance(key, str):
            raise type_error(path, key, "string keys")
        if key not in specs:
            raise unknown_field(join_key(path, key), key, specs, moved_fields(cls))
    kwargs = {}
    for name, spec in specs.items():
        where = join_key(path, name)
        if name in data:
            value = data[name]
            if spec.merge and isinstance(value, Mapping):
                value = merge_tables(config_to_dict(spec.default_value()), value)
            kwargs[name] = spec.node.build(value, where)
        elif spec.required:
            raise ConfigError(
                f"missing required field; expected {spec.node.expected}",
                field=where,
                allowed=spec.node.expected,
            )
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if not path:
            raise
        raise _reroot(e, path) from e


def merge_tables(base: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with the keys of `table` set, sub-tables merged the same way."""
    out = dict(base)
    for key, value in table.items():
        below = out.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            out[key] = merge_tables(below, value)
        else:
            out[key] = value
    return out


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The plain table for config instance `cfg`; fields holding None are left out."""
    out = {}
    for spec in schema(type(cfg)):
        value = getattr(cfg, spec.name)
        if value is not None:
            out[spec.name] = spec.node.dump(value)
    return out
