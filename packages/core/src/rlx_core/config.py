"""TOML into frozen, keyword-only config dataclasses, checked, with overrides, and back to TOML.

Every rlx component describes its configuration as `@dataclass(frozen=True, kw_only=True)` classes
that compose child configs and check themselves in `__post_init__`. This module is the one loader:

    cfg = load_config(RunConfig, "run.toml", overrides=["trainer.optim.lr=3e-4"])
    text = to_toml(cfg)  # from_dict(RunConfig, tomllib.loads(text)) == cfg

Supported field types: `int`, `float` (integers accepted), `str`, `bool`, `pathlib.Path`,
`Literal[...]`, `enum.Enum` subclasses (by value or name), `tuple[X, ...]`, `tuple[X, Y]`,
`list[X]`, `dict[str, X]`, nested config dataclasses, and `X | None` as a whole field type with
default None (TOML has no null: an absent key is the default). Anything else is a TypeError when the
class is first used. User mistakes raise `ConfigError` with the dotted path of the field
(`trainer.optim.lr`, `datasets[2].weight`), the value, and what is allowed; unknown keys get a
"did you mean" hint. The first problem raises, in a fixed order: unknown keys of a table, then its
fields in declaration order. A field's doc (for `describe` and the comments `to_toml` writes) is
`config_field(doc=...)`, else the trailing `# comment` of its line in the class source.

A parent whose defaults for a child differ from the child class's own (a run keeps more
paramserver versions than a bare paramserver) gives the field `config_field(default_factory=...,
merge=True)`: a table given for it then sets fields of that default instead of a fresh instance.
A class may list retired keys in a `MOVED_FIELDS: ClassVar[dict[str, str]]`; such a key is
answered with its message (where the field went) instead of "unknown field".
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

import tomli_w

from rlx_core._config_types import (
    ConfigNode,
    FieldSpec,
    Node,
    PathNode,
    SeqNode,
    StrNode,
    build_config,
    config_to_dict,
    join_index,
    join_key,
    schema,
    show,
)
from rlx_core.errors import ConfigError

__all__ = [
    "Override",
    "apply_overrides",
    "config_field",
    "describe",
    "from_dict",
    "load_config",
    "loads_config",
    "parse_override",
    "to_dict",
    "to_toml",
]

T = TypeVar("T")


def config_field(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    doc: str = "",
    merge: bool = False,
) -> Any:
    """`dataclasses.field` with a one-line `doc` (units, valid values) that `to_toml` writes as a
    comment and `describe` reports. Without a default the field is required. With `merge` (a
    config-class field with a default), a table given for the field sets fields of the default
    instead of starting from the class's own defaults; sub-tables merge the same way."""
    if default is not dataclasses.MISSING and default_factory is not dataclasses.MISSING:
        raise TypeError("config_field takes default or default_factory, not both")
    metadata: dict[str, Any] = {"doc": doc, "merge": merge}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    if default is not dataclasses.MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    return dataclasses.field(metadata=metadata)


def from_dict(cls: type[T], data: Mapping[str, Any], *, path: str = "") -> T:
    """Config `cls` built from plain `data` (as read from TOML), recursively checked.

    `path` is the dotted prefix for error messages when `data` is a sub-table of a larger file.
    Raises ConfigError for unknown keys, missing required fields, values of the wrong type or not
    allowed (including by the classes' own `__post_init__`, re-raised under the full path).
    """
    schema(cls)  # TypeError for an unsupported class, before looking at the data
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a table, got {show(data)}", field=path, value=data)
    result: T = build_config(cls, data, path)
    return result


def to_dict(cfg: Any) -> dict[str, Any]:
    """The plain, TOML-able dict of config instance `cfg`: child configs as nested dicts, tuples
    as lists, enums as their values, paths as strings; fields holding None are left out."""
    if isinstance(cfg, type) or not dataclasses.is_dataclass(cfg):
        raise TypeError(f"to_dict needs a config dataclass instance, got {cfg!r}")
    return config_to_dict(cfg)


def to_toml(cfg: Any, *, comments: bool = True) -> str:
    """TOML text for config instance `cfg`, such that `from_dict(type(cfg), tomllib.loads(text))
    == cfg`. With `comments`, each field's doc (`config_field(doc=...)`, else the trailing
    `# comment` of its line in the class source) is written above it as a comment."""
    if isinstance(cfg, type) or not dataclasses.is_dataclass(cfg):
        raise TypeError(f"to_toml needs a config dataclass instance, got {cfg!r}")
    out: list[str] = []
    _emit_table(cfg, (), in_array=False, comments=comments, out=out)
    return "".join(out)


def _doc_lines(spec: FieldSpec, comments: bool) -> str:
    if not (comments and spec.doc):
        return ""
    return "".join(f"# {line}".rstrip() + "\n" for line in spec.doc.splitlines())


def _wrap(names: tuple[str, ...], value: Any) -> dict[str, Any]:
    for name in reversed(names):
        value = {name: value}
    return value


def _emit_table(
    cfg: Any,
    names: tuple[str, ...],
    *,
    in_array: bool,
    comments: bool,
    out: list[str],
    lead: str = "",
) -> None:
    """Append the table of `cfg` at `names`: `lead` (its doc comment), its header, its plain
    values, then its sub-tables.

    Config-valued fields become `[a.b]` / `[[a.b]]` sections written here (so their docs can be
    written too); other values are formatted by tomli_w, under their full name when it makes them
    sections (dicts, arrays of tables).
    """
    if names:
        header = ".".join(names)
        blank = "\n" if out else ""
        out.append(blank + lead + (f"[[{header}]]\n" if in_array else f"[{header}]\n"))
    later: list[tuple[str, FieldSpec, Any]] = []
    for spec in schema(type(cfg)):
        value = getattr(cfg, spec.name)
        kind = _section_kind(spec.node, value)
        if kind == "plain":
            value = spec.node.dump(value)
            text = tomli_w.dumps({spec.name: value})
            if text.startswith(f"{spec.name} = "):  # else a dict or array of tables: sections
                out.append(_doc_lines(spec, comments) + text)
                continue
        if kind:
            later.append((kind, spec, value))
    for kind, spec, value in later:
        sub = (*names, spec.name)
        if kind == "plain":
            blank = "\n" if out else ""
            out.append(blank + _doc_lines(spec, comments) + tomli_w.dumps(_wrap(sub, value)))
            continue
        for i, item in enumerate(value if kind == "array" else (value,)):
            lead = _doc_lines(spec, comments) if i == 0 else ""
            array = kind == "array"
            _emit_table(item, sub, in_array=array, comments=comments, out=out, lead=lead)


def _section_kind(node: Node, value: Any) -> str:
    """How `_emit_table` writes a field value: "table" or "array" (config values, as sections),
    "plain" (the rest), or "" (None: not written)."""
    inner = node.unwrap()
    if value is None:
        return ""
    if isinstance(inner, ConfigNode):
        return "table"
    if isinstance(inner, SeqNode) and isinstance(inner.inner, ConfigNode) and value:
        return "array"
    return "plain"


class Override(NamedTuple):
    """One parsed `key=value` override."""

    path: tuple[str | int, ...]  # ("trainer", "optim", "lr"), ("datasets", 2, "weight")
    value: Any  # the value parsed as TOML, or the text itself when it does not parse
    text: str  # the value's text, stripped

    @property
    def key(self) -> str:
        """The dotted key, as in error messages: `datasets[2].weight`."""
        return _format_path(self.path)


_KEY_PART = re.compile(r'\s*(?:([A-Za-z0-9_-]+)|"([^"\\]*)")\s*((?:\[\s*\d+\s*\]\s*)*)')


def _format_path(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = join_index(path, part) if isinstance(part, int) else join_key(path, part)
    return path


def _split_override(text: str) -> tuple[str, str]:
    quoted = False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif ch == "=" and not quoted:
            return text[:i], text[i + 1 :]
    raise ConfigError(f"override {text!r} has no '='; write KEY=VALUE, e.g. trainer.optim.lr=3e-4")


def _parse_key(key: str, text: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    pos = 0
    while True:
        m = _KEY_PART.match(key, pos)
        if m is None or (m.end() < len(key) and key[m.end()] != "."):
            raise ConfigError(
                f"override {text!r}: cannot read the key {key.strip()!r}; write dotted names "
                "such as trainer.optim.lr or datasets[0].weight",
                value=text,
            )
        parts.append(m[1] if m[1] is not None else m[2])
        parts.extend(int(i) for i in re.findall(r"\d+", m[3]))
        if m.end() == len(key):
            return tuple(parts)
        pos = m.end() + 1


def parse_override(text: str) -> Override:
    """`KEY=VALUE` split into its key path and value.

    The key is dotted names (bare, or double-quoted for dict keys holding dots or spaces), with
    `[N]` to index arrays: `trainer.optim.lr`, `datasets[2].weight`, `tags."a.b"`. The value is
    read as a TOML value when it is one (`3`, `1e-4`, `true`, `"x"`, `[1, 2]`, `{a = 1}`),
    otherwise it is the text itself (`bfloat16`, `/data/x.jsonl`).
    """
    key, raw = _split_override(text)
    path = _parse_key(key, text)
    raw = raw.strip()
    value: Any = raw
    try:
        parsed = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        pass
    else:
        if list(parsed) == ["v"]:  # not `x\nother = 1` smuggling in a second key
            value = parsed["v"]
    return Override(path, value, raw)


def _node_at(cls: type, path: tuple[str | int, ...]) -> Node:
    node: Node = ConfigNode(cls)
    schema(cls)
    done: list[str | int] = []
    for part in path:
        node = node.child(part, _format_path(done))
        done.append(part)
    return node


def _set_in(obj: Any, path: tuple[str | int, ...], value: Any, done: tuple[str | int, ...]) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    here = _format_path((*done, head))
    if isinstance(head, int):
        if not isinstance(obj, (list, tuple)):
            raise ConfigError(f"cannot index into {obj!r}: not an array", field=here, value=obj)
        if head >= len(obj):
            raise ConfigError(f"index out of range: the array has {len(obj)} items", field=here)
        items = list(obj)
        items[head] = _set_in(items[head], rest, value, (*done, head))
        return items
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise ConfigError(f"cannot set a key inside {obj!r}: not a table", field=here, value=obj)
    table = dict(obj)
    table[head] = _set_in(table.get(head), rest, value, (*done, head))
    return table


def apply_overrides(
    data: Mapping[str, Any], overrides: Iterable[str], *, cls: type | None = None
) -> dict[str, Any]:
    """A copy of `data` with each `KEY=VALUE` override (see `parse_override`) set, in order.

    With `cls`, every key path must exist in its schema (an unknown name raises ConfigError with
    a "did you mean" hint; any key may be added to a `dict[str, X]` table), and a value for a
    string or path field is always its text, so `name=123` gives "123". Types are otherwise
    checked by the `from_dict` that follows. Missing intermediate tables are created.
    """
    result: Any = copy.deepcopy(dict(data))
    for text in overrides:
        override = parse_override(text)
        value = override.value
        if cls is not None:
            node = _node_at(cls, override.path).unwrap()
            if isinstance(node, (StrNode, PathNode)) and not isinstance(value, str):
                value = override.text
        result = _set_in(result, override.path, value, ())
    return result


def _read_error(path: str | os.PathLike[str], e: OSError) -> ConfigError:
    if isinstance(e, FileNotFoundError):
        return ConfigError(f"config file not found: {os.fspath(path)}", value=os.fspath(path))
    return ConfigError(f"cannot read config file {os.fspath(path)}: {e.strerror or e}")


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", msg)
        if m:
            line, column, reason = int(m[1]), int(m[2]), msg[: m.start()]
        else:  # "(at end of document)": point just past the last character
            lines = text.split("\n")
            line, column = len(lines), len(lines[-1]) + 1
            reason = re.sub(r"\s*\(at end of document\)$", " at the end of the text", msg)
        where = f"at line {line}, column {column}"
        raise ConfigError(f"{source}: invalid TOML {where}: {reason}", value=source) from None


def loads_config(
    cls: type[T], text: str, *, overrides: Iterable[str] = (), source: str = "<string>"
) -> T:
    """Config `cls` from TOML `text`, with `overrides` applied; `source` names it in errors."""
    data = _parse_toml(text, source)
    return from_dict(cls, apply_overrides(data, overrides, cls=cls))


def load_config(cls: type[T], path: str | os.PathLike[str], *, overrides: Iterable[str] = ()) -> T:
    """Config `cls` from the TOML file at `path`, with `overrides` (`KEY=VALUE`) applied.

    A missing or unreadable file, a TOML syntax error (named with its line and column) and every
    config problem raise ConfigError.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise _read_error(path, e) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{os.fspath(path)}: not UTF-8 text ({e.reason})") from None
    return loads_config(cls, text, overrides=overrides, source=os.fspath(path))


def _inline(value: Any) -> str:
    """A plain value in TOML inline syntax, for display."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{join_key('', k)} = {_inline(v)}" for k, v in value.items())
        return "{" + (f" {items} " if items else "") + "}"
    return repr(value)


def _describe(
    cls: type,
    prefix: str,
    rows: list[tuple[str, str, str, str]],
    seen: frozenset[type],
    base: Any = None,
) -> None:
    """Rows of `cls`'s fields; `base` is the instance whose values are the defaults (a merged
    field's default), else the class's own defaults are."""
    seen = seen | {cls}  # a recursive config is described once, not unrolled
    for spec in schema(cls):
        path = join_key(prefix, spec.name)
        node = spec.node.unwrap()
        value = None
        if base is not None:
            value = getattr(base, spec.name)
            default = "unset" if value is None else _inline(spec.node.dump(value))
            if isinstance(node, ConfigNode) and value is not None:
                default = ""
        elif spec.required:
            default = "required"
        else:
            value = spec.default_value()
            if value is None:
                default = "unset"
            elif isinstance(node, ConfigNode):
                default = ""
            else:
                default = _inline(spec.node.dump(value))
        rows.append((path, spec.node.name, default, spec.doc))
        if isinstance(node, SeqNode):
            node, path, value = node.inner, path + "[]", None
        if isinstance(node, ConfigNode) and node.cls not in seen:
            inherited = (spec.merge or base is not None) and isinstance(value, node.cls)
            _describe(node.cls, path, rows, seen, value if inherited else None)


def describe(cls: type) -> list[tuple[str, str, str, str]]:
    """One row per field of `cls` and of its nested configs, for help and docs:
    (dotted path, type, default in TOML syntax or "required"/"unset", doc).
    Fields of the configs in an array of tables are shown under `name[]`."""
    rows: list[tuple[str, str, str, str]] = []
    _describe(cls, "", rows, frozenset())
    return rows
