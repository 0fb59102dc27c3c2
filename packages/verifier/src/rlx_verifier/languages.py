"""The languages the verifier knows, which of them this machine has, and how each one compiles,
runs, and wraps an assert-style harness so that only reaching the harness's end counts.

Inside the sandbox a submission's files are at /prog (read-only when it runs; /build, writable,
while it compiles). Toolchains outside /usr are bound read-only under /opt.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from rlx_core.errors import InvalidArgument, Unimplemented

__all__ = ["LANGUAGES", "Language", "compose_assert_program", "detect_languages"]

PYTHON = "/usr/bin/python3"
GOCODE = "/usr/share/gocode"  # Debian's GOPATH of packaged Go libraries (testify)
GO_SEED = "/opt/goseed"  # where a Go build-cache seed is bound for assert-style builds


@dataclass(frozen=True, kw_only=True)
class Language:
    """How to build and run one language in the sandbox."""

    name: str
    source: str  # file name of the submission in /build
    compile: tuple[str, ...] = ()  # argv run in /build; empty: interpreted
    run: tuple[str, ...]  # argv run in /tmp with /prog holding the build; {memory_mb} filled in
    binds: tuple[tuple[str, str], ...] = ()  # (host, sandbox) toolchain directories
    env: tuple[tuple[str, str], ...] = ()
    extra_as_mb: int = 0  # address-space headroom over the memory limit (runtimes reserve)
    compile_as_mb: int = 2048  # compiler address space, MiB
    compile_s: float = 20.0  # compiler CPU seconds
    nproc: int = 16  # processes and threads the program may use
    version: str = ""  # what `--version` said at detection
    memory_markers: tuple[bytes, ...] = field(default=())  # stderr text meaning out-of-memory
    # assert style, when it builds differently (Go: a test binary with `go test -c`)
    test_compile: tuple[str, ...] = ()
    test_env: tuple[tuple[str, str], ...] = ()


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text and out.returncode == 0 else ""


def _python() -> Language | None:
    version = _version([PYTHON, "--version"])
    if not version:
        return None
    return Language(
        name="python",
        source="main.py",
        run=(PYTHON, "-I", "-S", "-B", "/prog/main.py"),
        version=version,
        memory_markers=(b"MemoryError",),
    )


def _cpp() -> Language | None:
    gxx = shutil.which("g++", path="/usr/bin")
    if gxx is None or not (version := _version([gxx, "--version"])):
        return None
    return Language(
        name="cpp",
        source="main.cpp",
        compile=(gxx, "-O2", "-std=c++17", "-pipe", "-o", "main", "main.cpp"),
        run=("/prog/main",),
        version=version,
        memory_markers=(b"std::bad_alloc",),
    )


def _rust() -> Language | None:
    rustc = shutil.which("rustc")
    if rustc is None:
        return None
    sysroot = subprocess.run(
        [rustc, "--print", "sysroot"], capture_output=True, text=True, check=False
    ).stdout.strip()
    real = os.path.join(sysroot, "bin", "rustc")
    if not sysroot or not os.path.exists(real) or not (version := _version([real, "--version"])):
        return None
    return Language(
        name="rust",
        source="main.rs",
        compile=("/opt/rust/bin/rustc", "-O", "--edition", "2021", "-o", "main", "main.rs"),
        run=("/prog/main",),
        binds=((sysroot, "/opt/rust"),),
        version=version,
        memory_markers=(b"memory allocation of",),
    )


def _go() -> Language | None:
    go = shutil.which("go", path="/usr/lib/go/bin:/usr/bin")
    if go is None:
        return None
    goroot = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(go)), ".."))
    if not goroot.startswith("/usr/") or not (version := _version([go, "version"])):
        return None
    # HumanEval-X Go tests use testify: Debian's golang-github-stretchr-testify-dev puts it in
    # /usr/share/gocode (GOPATH mode). The build cache starts from a seed the verifier made once
    # (testify compiled), copied in by the sandboxed compile itself (GO_SEED is bound read-only).
    test_compile: tuple[str, ...] = ()
    if os.path.isdir(os.path.join(GOCODE, "src/github.com/stretchr/testify")):
        test_compile = (
            "/bin/sh",
            "-c",
            f"{{ [ ! -d {GO_SEED} ] || cp -r {GO_SEED} /build/.gocache; }} && "
            f'exec {goroot}/bin/go test -c -o main "$@"',
            "go-test",
            ".",
        )
    return Language(
        name="go",
        source="main.go",
        compile=(f"{goroot}/bin/go", "build", "-o", "main", "main.go"),
        run=("/prog/main",),
        env=(("GOCACHE", "/tmp/gocache"), ("GOPATH", "/tmp/go"), ("GO111MODULE", "off")),
        extra_as_mb=1024,  # the Go runtime reserves address space up front
        compile_as_mb=4096,
        version=version,
        memory_markers=(b"runtime: out of memory",),
        test_compile=test_compile,
        test_env=(
            ("GOCACHE", "/build/.gocache"),
            ("GOPATH", f"/tmp/go:{GOCODE}"),
            ("GO111MODULE", "off"),
        ),
    )


def _java() -> Language | None:
    javac, java = shutil.which("javac", path="/usr/bin"), shutil.which("java", path="/usr/bin")
    if javac is None or java is None or not (version := _version([javac, "-version"])):
        return None
    jvm = (
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",
        "-Xmx{memory_mb}m",
        "-XX:CompressedClassSpaceSize=64m",
        "-XX:ReservedCodeCacheSize=64m",
        "-XX:MaxMetaspaceSize=128m",
    )
    return Language(
        name="java",
        source="Main.java",
        compile=(javac, "-J-Xmx512m", "-J-XX:+UseSerialGC", "-encoding", "UTF-8", "Main.java"),
        run=(java, *jvm, "-cp", "/prog", "Main"),
        extra_as_mb=1536,  # JVM code cache, class space, metaspace and thread stacks
        compile_as_mb=8192,
        nproc=64,
        version=version,
        memory_markers=(b"OutOfMemoryError",),
    )


LANGUAGES = ("python", "cpp", "rust", "go", "java")
ALIASES = {"py": "python", "python3": "python", "c++": "cpp", "cxx": "cpp", "rs": "rust"}


def detect_languages() -> dict[str, Language]:
    """Every language whose toolchain this machine has."""
    found = {}
    for detect in (_python, _cpp, _rust, _go, _java):
        lang = detect()
        if lang is not None:
            found[lang.name] = lang
    return found


def resolve(languages: dict[str, Language], name: str) -> Language:
    """The Language for a request; Unimplemented (not a CE) when the toolchain is missing."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LANGUAGES:
        raise InvalidArgument(f"unknown language {name!r} (known: {', '.join(LANGUAGES)})")
    if key not in languages:
        raise Unimplemented(
            f"language {key!r} has no toolchain on this verifier "
            f"(available: {', '.join(sorted(languages)) or 'none'})"
        )
    return languages[key]


# --- assert-style harnesses ---------------------------------------------------------------------

# The Python harness runs the candidate, then the tests in a namespace whose builtins are restored,
# with tracing reset and every candidate function guarded against returning objects of
# user-defined classes (an `__eq__` that is always True). Only its last line writes the marker.
_PY_HARNESS = r"""
import builtins as _b, os as _os, sys as _sys
_W, _EXIT, _TRACE = _os.write, _os._exit, _sys.settrace
_SAFE = (int, float, complex, str, bytes, bool, type(None), list, tuple, dict, set, frozenset)
_BUILTINS = dict(_b.__dict__)
_MARK = "{mark}".encode()
def _plain(v, depth=0):
    t = type(v)
    if t not in _SAFE or depth > 50:
        return False
    if t in (list, tuple, set, frozenset):
        return all(_plain(x, depth + 1) for x in v)
    if t is dict:
        return all(_plain(k, depth + 1) and _plain(x, depth + 1) for k, x in v.items())
    return True
def _guard(f):
    def g(*a, **k):
        r = f(*a, **k)
        if not _plain(r):
            raise TypeError("rlx: the candidate returned a " + type(r).__name__)
        return r
    return g
def _main():
    src = {candidate!r}
    ns = {{"__name__": "__main__", "__builtins__": _b}}
    try:
        exec(compile(src, "candidate.py", "exec"), ns)
    except SystemExit:
        _EXIT(97)  # exiting before the tests is not passing them
    _TRACE(None); _sys.setprofile(None)
    _b.__dict__.clear(); _b.__dict__.update(_BUILTINS)
    tests = {{k: (_guard(v) if callable(v) and getattr(v, "__module__", "") == "__main__"
                  and not isinstance(v, type) else v) for k, v in ns.items()}}
    tests["__builtins__"] = _BUILTINS
    try:
        exec(compile({harness!r}, "harness.py", "exec"), tests)
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    _TRACE(None)
    _W(1, b"\n" + _MARK + b"\n")
    _EXIT(0)
_main()
"""


def compose_assert_program(
    lang: Language, candidate: str, harness: str, mark: str
) -> dict[str, str]:
    """The files of one program: the candidate, then the harness, then a marker only the
    harness's end prints ({file name: text}).

    `mark` is a per-request random hex string; the verdict is AC only if the program exits 0 and
    the last line of stdout is the marker.
    """
    if lang.name == "python":
        return {lang.source: _PY_HARNESS.format(mark=mark, candidate=candidate, harness=harness)}
    if lang.name == "cpp":
        return {lang.source: _compose_cpp(candidate, harness, mark)}
    if lang.name == "rust":
        return {lang.source: _compose_rust(candidate, harness, mark)}
    if lang.name == "go":
        if not lang.test_compile:
            raise Unimplemented(
                "assert-style Go needs testify in /usr/share/gocode "
                "(Debian: golang-github-stretchr-testify-dev)"
            )
        return _compose_go(candidate, harness, mark)
    raise Unimplemented(f"assert-style judging is not available for {lang.name}")


def _literal(mark: str) -> str:
    """The marker line as a C/Rust/Go string literal of escapes (no plain text to grep)."""
    return "".join(f"\\x{b:02x}" for b in ("\n" + mark + "\n").encode())


_RUST_TEST = re.compile(r"#\[test\](?:\s*//[^\n]*)*\s*(?:pub\s+)?fn\s+(\w+)")
_RUST_MOD = re.compile(r"#\[cfg\(test\)\]\s*mod\s+(\w+)")


def _compose_rust(candidate: str, harness: str, mark: str) -> str:
    """`#[test]` functions become plain public functions that a generated `main` calls in order,
    then prints the marker; a failed `assert!` panics (exit 101)."""
    names = _RUST_TEST.findall(harness)
    if not names:
        raise InvalidArgument("a Rust harness needs at least one #[test] function")
    module = _RUST_MOD.search(harness)
    body = _RUST_MOD.sub(r"mod \1", harness)
    body = _RUST_TEST.sub(r"pub fn \1", body)
    if module is not None:
        body = re.sub(rf"\bmod\s+{module.group(1)}\b", f"pub mod {module.group(1)}", body, count=1)
    path = f"{module.group(1)}::" if module is not None else ""
    calls = "".join(f"    {path}{n}();\n" for n in names)
    return (
        f"{candidate}\n{body}\n"
        "fn main() {\n"
        f"{calls}"
        "    use std::io::Write;\n"
        f'    let m: &[u8] = b"{_literal(mark)}";\n'
        "    let mut out = std::io::stdout();\n"
        "    if out.write_all(m).and_then(|_| out.flush()).is_err() { std::process::exit(98); }\n"
        "}\n"
    )


_GO_PACKAGE = re.compile(r"^\s*package\s+\w+\s*;?\s*$", re.MULTILINE)
_GO_IMPORT = re.compile(r'^\s*import\s*(\([^)]*\)|(?:[\w.]+\s+)?"[^"]*")', re.MULTILINE)
_GO_SPEC = re.compile(r'(?:([\w.]+)\s+)?"([^"]+)"')


def _go_split(source: str) -> tuple[list[tuple[str, str]], str]:
    """(import specs as (alias, path), the source without its package clause and imports)."""
    specs = [m for decl in _GO_IMPORT.findall(source) for m in _GO_SPEC.findall(decl)]
    rest = _GO_IMPORT.sub("", _GO_PACKAGE.sub("", source))
    return specs, rest


def _compose_go(candidate: str, harness: str, mark: str) -> dict[str, str]:
    """Package main as a test binary: one file with the candidate and the harness (`func
    TestX(t *testing.T)`) sharing their imports, as HumanEval-X writes them, and a TestMain that
    prints the marker only when every test passed."""
    cand_specs, cand = _go_split(candidate)
    test_specs, test = _go_split(harness)
    specs = list(dict.fromkeys(test_specs + cand_specs))
    imports = "".join(f'    {a + " " if a else ""}"{p}"\n' for a, p in specs)
    program = f"package main\n\nimport (\n{imports})\n{cand}\n{test}\n"
    runner = (
        "package main\n\n"
        'import (\n    "os"\n    "testing"\n)\n\n'
        "func TestMain(m *testing.M) {\n"
        "    code := m.Run()\n"
        "    if code == 0 {\n"
        f'        if _, err := os.Stdout.Write([]byte("{_literal(mark)}")); err != nil {{\n'
        "            os.Exit(98)\n"
        "        }\n"
        "    }\n"
        "    os.Exit(code)\n"
        "}\n"
    )
    return {"main_test.go": program, "rlx_main_test.go": runner}


_MAIN = re.compile(r"\bint\s+main\s*\(")


def _compose_cpp(candidate: str, harness: str, mark: str) -> str:
    if not _MAIN.search(harness):
        return candidate + "\n" + harness + "\n"
    body = harness.rstrip()
    if not body.endswith("}"):
        raise InvalidArgument("a C++ harness must end with the closing brace of main")
    # `return 0;` before main's last brace: the renamed main is an ordinary function, where
    # falling off the end would be undefined behaviour.
    body = body[:-1] + "\n    return 0;\n}\n"
    literal = _literal(mark)
    return (
        f"{candidate}\n"
        "#undef NDEBUG\n#undef assert\n#include <cassert>\n#undef main\n"
        "#define main rlx_harness_main_\n"
        f"{body}\n"
        "#undef main\n#include <unistd.h>\n#include <cstdio>\n#include <cstring>\n"
        "int main() {\n"
        "    int rc = rlx_harness_main_();\n"
        "    std::fflush(stdout);\n"
        f'    static const char m[] = "{literal}";\n'
        "    if (rc == 0) { if (::write(1, m, sizeof(m) - 1) < 0) return 98; }\n"
        "    return rc;\n}\n"
    )
