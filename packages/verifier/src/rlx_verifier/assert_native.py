"""Assert-style C++ and Rust as two programs: a judge that never contains the candidate, and the
candidate, with plain data between them.

The judge is the harness's source plus generated proxy functions with the candidate's signatures,
compiled without one character of the candidate's code: no candidate macro, operator overload,
specialisation or static constructor exists in it. Each proxy encodes its arguments, sends them
to the candidate process over a pipe, and decodes the returned value (and the arguments a
non-const `&` / `&mut` parameter wrote back), with bounds. The judge is the run's top process: it
makes itself non-dumpable (so a same-uid process cannot ptrace it or open /proc/PID/mem), starts
the candidate binary (stdio inherited, the protocol on fds 3 and 4), runs the harness and exits 0
only when the harness ran to its end. No marker is needed: the verdict is the judge's exit status.

The candidate binary is the candidate's source plus a generated dispatcher main: call index in,
decoded arguments, the call, the encoded result out. It may do anything inside the sandbox; all it
can send the judge is data.

Signatures are read from the candidate's source: its top-level functions that the harness calls
and does not define itself. Their types must be in a small grammar (ints, floats, bool, char,
strings and the std containers of them); the generated code is written from the parsed type, never
from the candidate's text. Anything else makes a program that fails to compile with a message
naming the function and the type (a CE).

Wire format, little-endian: integers as 8 bytes (signed or unsigned by the type), bool and C++
char as 1 byte, Rust char as 4, floats by their exact bits, strings and containers as a u32 count
then the items, pairs and tuples as their items in order, Option as a byte then the value. A
message is a u32 length and that many bytes; the judge refuses a reply over 256 MiB and every count
larger than the bytes left (each item takes at least one), so a reply can never make it allocate
more than it received.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["compose_cpp", "compose_rust"]

# The judge is built as `main` (the language's run argv) and finds the `candidate` binary beside it.
JUDGE_SOURCE = {"cpp": "judge.cpp", "rust": "judge.rs"}
CANDIDATE_SOURCE = {"cpp": "candidate.cpp", "rust": "candidate.rs"}


@cache
def _native(name: str) -> str:
    """A source file of the programs' fixed parts (rlx_verifier/native/)."""
    return (files("rlx_verifier") / "native" / name).read_text()


@cache
def _containers() -> dict[str, str]:
    """The C++ codec of each container, by name (native/containers.hpp's sections)."""
    parts = re.split(r"^// --- (\w+)\n", _native("containers.hpp"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _show(toks: list[str]) -> str:
    """Type tokens as a person would write them."""
    text = re.sub(r"\s*([<>,:&()\[\]])\s*", r"\1", " ".join(toks))
    return text.replace(",", ", ")


class Unsupported(Exception):
    """A signature the judge cannot proxy; its message names the function and the type."""


def _why(e: Unsupported | RecursionError) -> str:
    """Why a candidate's signatures cannot be proxied (a type nested past Python's recursion
    limit is the candidate's doing too: a CE, not an infrastructure error)."""
    return "a type is nested too deep" if isinstance(e, RecursionError) else str(e)


# --- shared scanning ------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:([A-Za-z_]\w*)|(\d[\w.']*)|(::|->|'[A-Za-z_]\w*|[^\s\w]))")


def _tokens(text: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(1) or m.group(2) or m.group(3)
        if tok:
            out.append(tok)
    return out


def _match(toks: list[str], i: int, open_: str, close: str) -> int:
    """The index of the bracket closing toks[i] (an `open_`), or -1."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] == open_:
            depth += 1
        elif toks[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split(toks: list[str], sep: str = ",") -> list[list[str]]:
    """Split at top-level `sep` (outside (), [], {} and <>)."""
    parts: list[list[str]] = [[]]
    depth = 0
    for t in toks:
        if t in "([{<":
            depth += 1
        elif t in ")]}>":
            depth -= 1
        if t == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts if parts != [[]] else []


# A parsed Rust type: ("ref", mutable, inner), ("str",), ("slice", inner), ("prim", name),
# ("String",), ("gen", name, args), ("tuple", items).
RsType = tuple[Any, ...]


@dataclass(frozen=True)
class _CppFunc:
    name: str
    ret: str  # canonical type text, or "void"
    params: tuple[tuple[str, str], ...]  # (kind: value | cref | ref, canonical type text)


@dataclass(frozen=True)
class _RsFunc:
    name: str
    ret: RsType
    params: tuple[tuple[str, RsType], ...]  # (kind: value | ref | mut, type)


def _identifiers(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


# --- C++ ----------------------------------------------------------------------------------------

_CPP_STRIP = re.compile(
    r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S
)
_CPP_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([A-Za-z0-9_][A-Za-z0-9_+./-]*)>", re.M)
_CPP_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]*)$", re.M)
_CPP_TYPEDEF = re.compile(r"\btypedef\s+([\w\s:<>,]+?)\s+([A-Za-z_]\w*)\s*;")
_CPP_USING = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([\w\s:<>,]+?)\s*;")
_CPP_SCALARS = {
    ("char",): "char",
    ("char", "signed"): "signed char",
    ("char", "unsigned"): "unsigned char",
    ("short",): "short",
    ("int", "short"): "short",
    ("short", "signed"): "short",
    ("short", "unsigned"): "unsigned short",
    ("int", "short", "unsigned"): "unsigned short",
    ("int",): "int",
    ("signed",): "int",
    ("int", "signed"): "int",
    ("unsigned",): "unsigned int",
    ("int", "unsigned"): "unsigned int",
    ("long",): "long",
    ("int", "long"): "long",
    ("long", "signed"): "long",
    ("long", "unsigned"): "unsigned long",
    ("int", "long", "unsigned"): "unsigned long",
    ("long", "long"): "long long",
    ("int", "long", "long"): "long long",
    ("long", "long", "signed"): "long long",
    ("long", "long", "unsigned"): "unsigned long long",
    ("int", "long", "long", "unsigned"): "unsigned long long",
    ("bool",): "bool",
    ("float",): "float",
    ("double",): "double",
}
_CPP_NAMED = {
    "size_t": "std::size_t",
    "string": "std::string",
    **{f"{u}int{n}_t": f"std::{u}int{n}_t" for u in ("", "u") for n in (8, 16, 32, 64)},
}
_CPP_TEMPLATES = {
    "vector": 1,
    "set": 1,
    "unordered_set": 1,
    "deque": 1,
    "map": 2,
    "unordered_map": 2,
    "pair": 2,
}
_MAX_ALIAS_TOKENS = 10_000  # tokens read from aliases while expanding one type
_CPP_WORDS = {"char", "short", "int", "long", "signed", "unsigned", "bool", "float", "double"}


def _cpp_strip(source: str) -> str:
    """Comments removed, string and character literals emptied (lines kept)."""

    def blank(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("/"):
            return " " + "\n" * text.count("\n")
        return ('""' if text[-1] == '"' else "'0'") + "\n" * text.count("\n")

    return _CPP_STRIP.sub(blank, source)


class _CppTypes:
    """Parses C++ type tokens (after the candidate's aliases) into canonical type text."""

    def __init__(self, aliases: dict[str, list[str]]) -> None:
        self.aliases = aliases

    def expand(self, toks: list[str], where: str) -> list[str]:
        """`toks` with the candidate's aliases replaced, 8 deep at most; Unsupported past
        _MAX_ALIAS_TOKENS tokens read from aliases (aliases of aliases grow exponentially)."""
        out: list[str] = []
        budget = [_MAX_ALIAS_TOKENS]

        def walk(toks: list[str], depth: int) -> None:
            for t in toks:
                if depth:  # the type's own tokens are bounded by the source
                    budget[0] -= 1
                    if budget[0] < 0:
                        raise Unsupported(
                            f"{where}: aliases expanding to over {_MAX_ALIAS_TOKENS} tokens"
                        )
                if t in self.aliases and depth < 8:
                    walk(self.aliases[t], depth + 1)
                else:
                    out.append(t)

        walk(toks, 0)
        return out

    def parse(self, toks: list[str], where: str) -> tuple[str, str]:
        """(kind: "value" | "cref" | "ref", canonical type) of a parameter or return type."""
        toks = [t for t in self.expand(toks, where) if t not in ("inline", "static", "constexpr")]
        kind = "value"
        if toks and toks[-1] == "&":
            toks = toks[:-1]
            kind = "ref"
        if "const" in toks:
            toks = [t for t in toks if t != "const"]
            kind = "cref" if kind == "ref" else "value"
        text, rest = self._type(toks, where)
        if rest:
            raise Unsupported(f"{where}: the type {_show(toks)!r} is not supported")
        return kind, text

    def _type(self, toks: list[str], where: str) -> tuple[str, list[str]]:
        if toks[:2] == ["std", "::"]:
            toks = toks[2:]
        if not toks:
            raise Unsupported(f"{where}: a missing type")
        words = []
        while toks and toks[0] in _CPP_WORDS:
            words.append(toks.pop(0))
        if words:
            key = tuple(sorted(words))
            if key not in _CPP_SCALARS:
                raise Unsupported(f"{where}: the type {_show(words)!r} is not supported")
            return _CPP_SCALARS[key], toks
        head = toks[0]
        if head in _CPP_NAMED:
            return _CPP_NAMED[head], toks[1:]
        if head in _CPP_TEMPLATES and len(toks) > 1 and toks[1] == "<":
            end = _match(toks, 1, "<", ">")
            if end < 0:
                raise Unsupported(f"{where}: unbalanced <> in {_show(toks)!r}")
            args = _split(toks[2:end])
            if len(args) != _CPP_TEMPLATES[head]:
                raise Unsupported(f"{where}: std::{head} with {len(args)} arguments")
            inner = []
            for arg in args:
                text, rest = self._type(list(arg), where)
                if rest:
                    raise Unsupported(f"{where}: the type {_show(arg)!r} is not supported")
                inner.append(text)
            return f"std::{head}<{', '.join(inner)}>", toks[end + 1 :]
        raise Unsupported(f"{where}: the type {_show(toks)!r} is not supported")


def _cpp_functions(stripped: str) -> list[tuple[str, list[str], list[str]]]:
    """Top-level function definitions: (name, return-type tokens, parameter tokens)."""
    text = "\n".join(
        "" if line.lstrip().startswith("#") else line for line in stripped.splitlines()
    )
    toks = _tokens(text)
    found = []
    start, depth, i = 0, 0, 0
    while i < len(toks):
        t = toks[i]
        if t == "{":
            if depth == 0:
                head = toks[start:i]
                while head and head[-1] in ("const", "noexcept", "override"):
                    head = head[:-1]  # (const on a free function is an error the compiler gives)
                if head and head[-1] == ")":
                    close = len(head) - 1
                    depth_p, j = 0, close
                    while j >= 0:
                        depth_p += {")": 1, "(": -1}.get(head[j], 0)
                        if depth_p == 0:
                            break
                        j -= 1
                    if j > 0 and re.fullmatch(r"[A-Za-z_]\w*", head[j - 1]):
                        name, ret = head[j - 1], head[: j - 1]
                        if "template" not in ret and (not ret or ret[-1] != "::"):
                            found.append((name, ret, head[j + 1 : close]))
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif t == ";" and depth == 0:
            start = i + 1
        i += 1
    return found


def _cpp_params(params: list[str], aliases: dict[str, list[str]]) -> list[list[str]]:
    """Each parameter's type tokens: its name and default value dropped."""
    out = []
    for param in _split(params):
        p = param[: param.index("=")] if "=" in param else param
        named = len(p) > 1 and re.fullmatch(r"[A-Za-z_]\w*", p[-1]) and p[-2] != "::"
        if named and p[-1] not in _CPP_WORDS and p[-1] not in _CPP_NAMED and p[-1] not in aliases:
            p = p[:-1]
        out.append(p)
    return [] if out == [["void"]] else out


def _cpp_signatures(candidate: str, harness: str) -> tuple[list[_CppFunc], list[str], bool]:
    """(the functions to proxy, the candidate's system includes, whether it uses namespace std)."""
    stripped = _cpp_strip(candidate)
    aliases: dict[str, list[str]] = {}
    for m in _CPP_DEFINE.finditer(stripped):
        aliases[m.group(1)] = _tokens(m.group(2))
    for m in _CPP_TYPEDEF.finditer(stripped):
        aliases[m.group(2)] = _tokens(m.group(1))
    for m in _CPP_USING.finditer(stripped):
        aliases[m.group(1)] = _tokens(m.group(2))
    types = _CppTypes(aliases)
    h_stripped = _cpp_strip(harness)
    used = _identifiers(h_stripped)
    defined = {name for name, _, _ in _cpp_functions(h_stripped)}
    funcs: list[_CppFunc] = []
    seen = set()
    for name, ret, params in _cpp_functions(stripped):
        if name not in used or name in defined or name == "main":
            continue
        where = f"function {name!r}"
        if (ret and ret[0] == "auto") or "operator" in ret:
            raise Unsupported(f"{where}: an `auto` return type is not supported")
        r_kind, r_type = ("value", "void") if ret == ["void"] else types.parse(ret, where)
        if r_kind != "value":
            raise Unsupported(f"{where}: returning a reference is not supported")
        parsed = [types.parse(p, where) for p in _cpp_params(params, aliases)]
        key = (name, tuple(parsed))
        if key not in seen:
            seen.add(key)
            funcs.append(_CppFunc(name, r_type, tuple(parsed)))
    includes = [m.group(1) for m in _CPP_INCLUDE.finditer(stripped) if ".." not in m.group(1)]
    uses_std = re.search(r"\busing\s+namespace\s+std\s*;", stripped) is not None
    return funcs, includes, uses_std


def _cpp_wire(funcs: list[_CppFunc]) -> str:
    """The codec for the containers these signatures use, and the message I/O."""
    used = set()
    for f in funcs:
        for t in [f.ret, *(t for _, t in f.params)]:
            used.update(re.findall(r"std::(\w+)<", str(t)))
    names = [n for n in _containers() if n in used]
    heads = "".join(f"#include <{n}>\n" for n in names)
    codecs = "".join(_containers()[n] for n in names)
    return f"{heads}{_native('wire.hpp')}namespace rlx {{\n{codecs}}}  // namespace rlx\n"


_CPP_MAIN = re.compile(r"\bint\s+main\s*\(")


def compose_cpp(candidate: str, harness: str) -> dict[str, str]:
    """{judge.cpp, candidate.cpp}: see the module docstring."""
    if not _CPP_MAIN.search(harness):
        raise ValueError("a C++ harness needs a main function")
    body = harness.rstrip()
    if not body.endswith("}"):
        raise ValueError("a C++ harness must end with the closing brace of main")
    try:
        funcs, includes, uses_std = _cpp_signatures(candidate, harness)
    except (Unsupported, RecursionError) as e:
        message = f"rlx: assert-style C++ cannot judge this candidate: {_why(e)}".replace('"', "'")
        return {JUDGE_SOURCE["cpp"]: f'#error "{message}"\n', CANDIDATE_SOURCE["cpp"]: ""}
    # The harness's own includes and using-lines come first too (it is trusted): the probes
    # below must see every name the harness's calls could reach.
    hoisted = [
        line.strip()
        for line, bare in zip(harness.splitlines(), _cpp_strip(harness).splitlines(), strict=False)
        if re.match(r"\s*#\s*include\s*[<\"]|\s*using\s+(namespace\s+)?[\w:]+\s*;", bare)
    ]
    head = "".join(f"#include <{i}>\n" for i in includes)
    head += "using namespace std;\n" if uses_std else ""
    head += "".join(f"{h}\n" for h in hoisted)
    probes = [_cpp_probe(k, f) for k, f in enumerate(funcs)]
    proxies = [_cpp_proxy(k, f) for k, f in enumerate(funcs)]
    cases = [_cpp_case(k, f) for k, f in enumerate(funcs)]
    harness_body = body[:-1] + "\n    return 0;\n}\n"
    wire = _cpp_wire(funcs)
    judge = (
        f"{head}{wire}{_native('judge.hpp')}{''.join(probes)}{''.join(proxies)}"
        "#undef NDEBUG\n#define main rlx_harness_main_\n"
        f"{harness_body}\n#undef main\n"
        "int main() {\n"
        "    rlx::start();\n"
        "    int rc = rlx_harness_main_();\n"
        "    ::kill(rlx::candidate, SIGKILL);\n"
        "    std::exit(rc == 0 ? 0 : (rc & 255) ? rc & 255 : 1);  // flushes the harness's output\n"
        "}\n"
    )
    program = f"#define main rlx_candidate_main_\n{candidate}\n#undef main\n{wire}" + _native(
        "dispatch.cpp"
    ).replace("/*{cases}*/", "\n".join(cases))
    return {JUDGE_SOURCE["cpp"]: judge, CANDIDATE_SOURCE["cpp"]: program}


def _cpp_proxy(k: int, f: _CppFunc) -> str:
    """The judge's stand-in for candidate function number `k`."""
    ptypes = [_cpp_param(kind, t) for kind, t in f.params]
    params = ", ".join(f"{p} a{j}" for j, p in enumerate(ptypes))
    lines = [f"{f.ret} {f.name}({params}) {{", "    rlx::Out w;"]
    lines += [f"    rlx::put(w, a{j});" for j in range(len(ptypes))]
    lines.append(f'    rlx::In r = rlx::call({k}, w, "{f.name}");')
    if f.ret != "void":
        lines += [f"    {f.ret} out{{}};", "    rlx::get(r, out);"]
    lines += [f"    rlx::get(r, a{j});" for j, (kind, _) in enumerate(f.params) if kind == "ref"]
    lines.append(f'    rlx::done(r, "{f.name}");')
    if f.ret != "void":
        lines.append("    return out;")
    return "\n".join(lines) + "\n}\n"


def _cpp_case(k: int, f: _CppFunc) -> str:
    """The candidate dispatcher's case for function number `k`."""
    pad = " " * 16
    case = [f"            case {k}: {{"]
    case += [f"{pad}{t} a{j}{{}}; rlx::get(in, a{j});" for j, (_, t) in enumerate(f.params)]
    case.append(f"{pad}if (!in.ok || in.n != 0) ::_exit(1);")
    args = ", ".join(f"a{j}" for j in range(len(f.params)))
    if f.ret == "void":
        case.append(f"{pad}{f.name}({args});")
    else:
        case.append(f"{pad}rlx::put(out, ({f.ret})({f.name}({args})));")
    case += [f"{pad}rlx::put(out, a{j});" for j, (kind, _) in enumerate(f.params) if kind == "ref"]
    case.append(f"{pad}break;\n            }}")
    return "\n".join(case)


def _cpp_probe(k: int, f: _CppFunc) -> str:
    """Judge code that fails to compile if calling `name` with these argument types already
    reaches a function of the harness's headers: a proxy named `max` or `abs` would otherwise
    take the harness's own calls (a non-template function beats std's templates)."""
    name, ptypes = f.name, [_cpp_param(kind, t) for kind, t in f.params]
    why = f"rlx: the candidate function {name} has the signature of a function the harness sees"
    if not ptypes:  # a call without arguments is not dependent: no other `name` may exist
        return (
            f"namespace rlx_probe_{k} {{ int {name}; }}\n"
            f"inline void rlx_probe_{k}_() {{\n"
            f"    using namespace rlx_probe_{k};\n    (void)sizeof({name});\n}}\n"
        )
    args = "".join(f", {p}" for p in ptypes)
    return (
        f"namespace rlx_probe_{k} {{\n"
        f"template <class R, class... A> auto f(int) -> "
        f"decltype({name}(std::declval<A>()...), std::true_type{{}});\n"
        "template <class R, class... A> std::false_type f(...);\n}\n"
        f'static_assert(!decltype(rlx_probe_{k}::f<void{args}>(0))::value, "{why}");\n'
    )


def _cpp_param(kind: str, t: str) -> str:
    return {"value": t, "cref": f"const {t}&", "ref": f"{t}&"}[kind]


# --- Rust ---------------------------------------------------------------------------------------

_RS_STRIP = re.compile(
    r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\[^\']{1,10}|[^\'\\\n])\'',
    re.S,
)
_RS_USE = re.compile(r"^[ \t]*(?:pub[ \t]+)?use[ \t]+(std::[\w:{},\s]*?);", re.M)
_RS_TEST = re.compile(r"#\[test\](?:\s*//[^\n]*)*\s*(?:pub\s+)?fn\s+(\w+)")
_RS_MOD = re.compile(r"#\[cfg\(test\)\]\s*mod\s+(\w+)")
_RS_INTS = ("i8", "i16", "i32", "i64", "isize", "u8", "u16", "u32", "u64", "usize")
_RS_PRIMS = (*_RS_INTS, "f32", "f64", "bool", "char")
_RS_GENERIC = {
    "Vec": ("::std::vec::Vec", 1),
    "VecDeque": ("::std::collections::VecDeque", 1),
    "Option": ("::std::option::Option", 1),
    "HashSet": ("::std::collections::HashSet", 1),
    "BTreeSet": ("::std::collections::BTreeSet", 1),
    "HashMap": ("::std::collections::HashMap", 2),
    "BTreeMap": ("::std::collections::BTreeMap", 2),
}
# Values of the std prelude the harness reaches by name: a candidate function of the same name
# would take its calls (`use super::*` shadows the prelude).
_RS_PRELUDE = frozenset(
    ("Some", "None", "Ok", "Err", "drop", "size_of", "size_of_val", "align_of", "align_of_val")
)
_RS_PATHS = {"std", "collections", "vec", "option", "string", "::"}


def _rs_type(toks: list[str], where: str) -> tuple[RsType, list[str]]:
    """(the type at the start of `toks`, the tokens after it)."""
    if not toks:
        raise Unsupported(f"{where}: a missing type")
    if toks[0] in ("&", "(", "["):
        return _rs_compound(toks, where)
    return _rs_named(toks, where)


def _rs_compound(toks: list[str], where: str) -> tuple[RsType, list[str]]:
    """A reference, tuple or slice type."""
    if toks[0] == "&":
        rest = toks[1:]
        if rest and rest[0].startswith("'"):
            rest = rest[1:]
        mutable = bool(rest) and rest[0] == "mut"
        inner, rest = _rs_type(rest[1:] if mutable else rest, where)
        return ("ref", mutable, inner), rest
    close = ")" if toks[0] == "(" else "]"
    end = _match(toks, 0, toks[0], close)
    if end < 0 or ";" in toks[1:end]:
        raise Unsupported(f"{where}: the type {_show(toks)!r} is not supported")
    if toks[0] == "(":
        items = [_rs_whole(part, where) for part in _split(toks[1:end])]
        return ("tuple", tuple(items)), toks[end + 1 :]
    return ("slice", _rs_whole(toks[1:end], where)), toks[end + 1 :]


def _rs_named(toks: list[str], where: str) -> tuple[RsType, list[str]]:
    """A primitive, String or std generic type, with or without its std path."""
    i = 0
    while (i + 1 < len(toks) and toks[i] in _RS_PATHS and toks[i + 1] == "::") or toks[i] == "::":
        i += 1 if toks[i] == "::" else 2
    head, toks = toks[i], toks[i + 1 :]
    if head in _RS_PRIMS:
        return ("prim", head), toks
    if head == "str":
        return ("str",), toks
    if head == "String":
        return ("String",), toks
    if head in _RS_GENERIC and toks and toks[0] == "<":
        end = _match(toks, 0, "<", ">")
        if end < 0:
            raise Unsupported(f"{where}: unbalanced <> in {head}")
        args = tuple(_rs_whole(part, where) for part in _split(toks[1:end]))
        if len(args) != _RS_GENERIC[head][1]:
            raise Unsupported(f"{where}: {head} with {len(args)} type arguments")
        return ("gen", head, args), toks[end + 1 :]
    raise Unsupported(f"{where}: the type {_show([head, *toks])!r} is not supported")


def _rs_whole(toks: list[str], where: str) -> RsType:
    t, rest = _rs_type(list(toks), where)
    if rest:
        raise Unsupported(f"{where}: the type {_show(toks)!r} is not supported")
    return t


def _rs_text(t: RsType, static: bool) -> str:
    """The type as Rust text; `static`: every reference `&'static` (decoded values are leaked)."""
    kind = t[0]
    if kind == "ref":
        life = "'static " if static else ""
        return f"&{life}{'mut ' if t[1] else ''}{_rs_text(t[2], static)}"
    if kind == "slice":
        return f"[{_rs_text(t[1], static)}]"
    if kind == "gen":
        return f"{_RS_GENERIC[t[1]][0]}<{', '.join(_rs_text(a, static) for a in t[2])}>"
    if kind == "tuple":
        items = [_rs_text(a, static) for a in t[1]]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return {"str": "str", "String": "::std::string::String"}.get(kind) or t[1]


def _rs_decodable(t: RsType, where: str) -> None:
    """Check a type can be decoded: references only as `&str` inside containers."""
    if t[0] == "ref":
        if t[2] != ("str",) or t[1]:
            raise Unsupported(
                f"{where}: the reference type {_rs_text(t, False)!r} is not supported"
            )
        return
    if t[0] in ("str", "slice"):
        raise Unsupported(f"{where}: an unsized {_rs_text(t, False)!r} is not supported")
    for a in t[2] if t[0] == "gen" else t[1] if t[0] == "tuple" else ():
        _rs_decodable(a, where)


def _rs_owned(t: RsType) -> RsType:
    """What a parameter of type `&T` is decoded into on the candidate's side."""
    if t[0] == "str":
        return ("String",)
    if t[0] == "slice":
        return ("gen", "Vec", (t[1],))
    return t


def _rs_functions(stripped: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    """Top-level `fn`s: (name, generics tokens, parameter tokens, return tokens)."""
    toks = _tokens(stripped)
    found = []
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
        elif t == "fn" and depth == 0 and i + 1 < len(toks):
            name, j = toks[i + 1], i + 2
            generics: list[str] = []
            if j < len(toks) and toks[j] == "<":
                end = _match(toks, j, "<", ">")
                if end < 0:  # never closed (a cut-off source): nothing after it is top level
                    break
                generics, j = toks[j + 1 : end], end + 1
            if j < len(toks) and toks[j] == "(":
                end = _match(toks, j, "(", ")")
                if end < 0:
                    break
                params, j = toks[j + 1 : end], end + 1
                ret: list[str] = []
                if j < len(toks) and toks[j] == "->":
                    k = j + 1
                    while k < len(toks) and toks[k] not in ("{", "where", ";"):
                        k += 1
                    ret, j = toks[j + 1 : k], k
                if j < len(toks) and toks[j] in ("{", "where"):
                    found.append((name, generics, params, ret))
                i = j - 1
        i += 1
    return found


def _rs_strip(source: str) -> str:
    """Comments removed, string literals emptied and character literals blanked."""
    return _RS_STRIP.sub(lambda m: '""' if m.group(0)[-1] == '"' else " ", source)


def _rs_signatures(candidate: str, harness: str) -> tuple[list[_RsFunc], list[str]]:
    stripped, h_stripped = _rs_strip(candidate), _rs_strip(harness)
    used = _identifiers(h_stripped)
    defined = set(re.findall(r"\bfn\s+([A-Za-z_]\w*)", h_stripped))  # at any depth
    funcs, seen = [], set()
    for name, generics, params, ret in _rs_functions(stripped):
        if name not in used or name in defined or name == "main" or name in seen:
            continue
        seen.add(name)
        where = f"function {name!r}"
        if name in _RS_PRELUDE:
            raise Unsupported(
                f"{where}: the name of a prelude item the harness sees is not supported"
            )
        if any(not g.startswith("'") and g != "," for g in generics):
            raise Unsupported(f"{where}: generic functions are not supported")
        parsed = []
        for p in _split(params):
            if ":" not in p:
                raise Unsupported(f"{where}: the parameter {_show(p)!r} is not supported")
            pattern, ptype = p[: p.index(":")], p[p.index(":") + 1 :]
            if pattern not in (["mut", pattern[-1]], [pattern[-1]]) or not re.fullmatch(
                r"[A-Za-z_]\w*", pattern[-1]
            ):
                raise Unsupported(f"{where}: the parameter pattern {_show(pattern)!r}")
            t = _rs_whole(ptype, where)
            if t[0] == "ref":
                _rs_decodable(_rs_owned(t[2]), where)
                kind = "mut" if t[1] else "ref"
                if kind == "mut" and t[2][0] == "str":
                    raise Unsupported(f"{where}: `&mut str` is not supported")
            else:
                _rs_decodable(t, where)
                kind = "value"
            parsed.append((kind, t))
        r = _rs_whole(ret, where) if ret else ("tuple", ())
        if r[0] == "ref" and (r[1] or r[2] != ("str",)):
            raise Unsupported(f"{where}: returning {_rs_text(r, False)!r} is not supported")
        if r[0] != "ref":
            _rs_decodable(r, where)
        funcs.append(_RsFunc(name, r, tuple(parsed)))
    uses = [
        m.group(1)
        for m in _RS_USE.finditer(stripped)
        if re.search(r"\bas\b", m.group(1)) is None and "*" not in m.group(1)
    ]
    return funcs, uses


def _rs_proxy(k: int, f: _RsFunc) -> str:
    """The judge's stand-in for candidate function number `k`: a `&mut` argument gets the value
    the candidate's call left in it."""
    params = ", ".join(f"a{j}: {_rs_text(t, False)}" for j, (_, t) in enumerate(f.params))
    ret = _rs_text(f.ret, True)
    lines = [f"pub fn {f.name}({params}) -> {ret} {{", "    let mut w: Vec<u8> = Vec::new();"]
    lines += [f"    rlx_wire::Put::put(&a{j}, &mut w);" for j in range(len(f.params))]
    lines.append(f'    let reply = rlx::call({k}, w, "{f.name}");')
    lines.append("    let mut r = rlx_wire::Rd { b: &reply };")
    lines.append("    let v = (|| -> Option<_> {")
    lines.append(f"        let out: {ret} = rlx_wire::Get::get(&mut r)?;")
    for j, (kind, t) in enumerate(f.params):
        if kind == "mut" and t[2][0] == "slice":
            owned = _rs_text(_rs_owned(t[2]), True)
            lines.append(f"        let b{j}: {owned} = rlx_wire::Get::get(&mut r)?;")
            lines.append(f"        if b{j}.len() != a{j}.len() {{ return None; }}")
            lines.append(f"        a{j}.clone_from_slice(&b{j});")
        elif kind == "mut":
            lines.append(f"        *a{j} = rlx_wire::Get::get(&mut r)?;")
    lines += ["        Some(out)", "    })();", f'    rlx::done(v, &r, "{f.name}")']
    return "\n".join(lines) + "\n}\n"


def _rs_case(k: int, f: _RsFunc) -> str:
    """The candidate dispatcher's arm for function number `k`: a reference parameter gets a
    decoded owned value (`&str` a String, `&[T]` a Vec)."""
    pad = " " * 20
    case = [f"                {k} => (|| -> Option<()> {{"]
    args = []
    for j, (kind, t) in enumerate(f.params):
        if kind == "value":
            case.append(f"{pad}let a{j}: {_rs_text(t, True)} = Get::get(&mut r)?;")
            args.append(f"a{j}")
            continue
        case.append(f"{pad}let mut a{j}: {_rs_text(_rs_owned(t[2]), True)} = Get::get(&mut r)?;")
        if kind == "ref":
            args.append(f"&a{j}")
        else:
            args.append(f"&mut a{j}[..]" if t[2][0] == "slice" else f"&mut a{j}")
    case.append(f"{pad}let out = super::{f.name}({', '.join(args)});")
    case.append(f"{pad}Put::put(&out, &mut w);")
    case += [
        f"{pad}Put::put(&a{j}, &mut w);" for j, (kind, _) in enumerate(f.params) if kind == "mut"
    ]
    case.append(f"{pad}Some(())\n                }})(),")
    return "\n".join(case)


def compose_rust(candidate: str, harness: str) -> dict[str, str]:
    """{judge.rs, candidate.rs}: see the module docstring."""
    names = _RS_TEST.findall(harness)
    if not names:
        raise ValueError("a Rust harness needs at least one #[test] function")
    try:
        funcs, uses = _rs_signatures(candidate, harness)
    except (Unsupported, RecursionError) as e:
        message = f"rlx: assert-style Rust cannot judge this candidate: {_why(e)}"
        error = f'compile_error!(r#"{message}"#);\nfn main() {{}}\n'
        return {JUDGE_SOURCE["rust"]: error, CANDIDATE_SOURCE["rust"]: ""}
    module = _RS_MOD.search(harness)
    body = _RS_MOD.sub(r"mod \1", harness)
    body = _RS_TEST.sub(r"pub fn \1", body)
    if module is not None:
        body = re.sub(rf"\bmod\s+{module.group(1)}\b", f"pub mod {module.group(1)}", body, count=1)
    path = f"{module.group(1)}::" if module is not None else ""
    proxies = [_rs_proxy(k, f) for k, f in enumerate(funcs)]
    cases = [_rs_case(k, f) for k, f in enumerate(funcs)]
    calls = "".join(f"        {path}{n}();\n" for n in names)
    head = "#![allow(unused, non_snake_case, non_camel_case_types, dead_code, deprecated)]\n"
    judge = (
        head
        + "".join(f"use {u};\n" for u in uses)
        + _native("wire.rs")
        + _native("judge.rs")
        + "".join(proxies)
        + f"{body}\n"
        + "fn main() {\n    rlx::start();\n"
        + "    let ok = ::std::panic::catch_unwind(|| {\n"
        + calls
        + "    })\n    .is_ok();\n    rlx::finish(ok)\n}\n"
    )
    program = (
        "#![no_main]\n"
        + candidate
        + "\n"
        + _native("wire.rs")
        + _native("dispatch.rs").replace("/*{cases}*/", "\n".join(cases))
    )
    return {JUDGE_SOURCE["rust"]: judge, CANDIDATE_SOURCE["rust"]: program}
