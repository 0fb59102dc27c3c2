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

from rlx_core.configs.verifier import LANGUAGES, canonical_language
from rlx_core.errors import InvalidArgument, Unimplemented
from rlx_verifier import assert_python
from rlx_verifier.assert_native import compose_cpp, compose_rust

__all__ = ["LANGUAGES", "Language", "compose_assert_program", "detect_languages"]

PYTHON = "/usr/bin/python3"
GOCODE = "/usr/share/gocode"  # Debian's GOPATH of packaged Go libraries (testify)
GO_SEED = "/opt/goseed"  # where a Go build-cache seed is bound for assert-style builds
RUSTC = ("/opt/rust/bin/rustc", "-O", "--edition", "2021", "-o", "main", "main.rs")


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
        # assert style: the judge (harness + proxies, /prog/main) and the candidate binary; the
        # judge's source is removed and its binary made execute-only (the tests stay unread)
        test_compile=(
            "/bin/sh",
            "-c",
            f"{gxx} -O0 -std=c++17 -pipe -o main judge.cpp && rm judge.cpp && chmod 111 main && "
            f"exec {gxx} -O2 -std=c++17 -pipe -o candidate candidate.cpp",
        ),
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
        compile=RUSTC,
        run=("/prog/main",),
        binds=((sysroot, "/opt/rust"),),
        version=version,
        memory_markers=(b"memory allocation of",),
        # assert style, as for C++: the judge (execute-only) and the candidate binary
        test_compile=(
            "/bin/sh",
            "-c",
            "/opt/rust/bin/rustc -C opt-level=0 --edition 2021 -o main judge.rs && rm judge.rs "
            "&& chmod 111 main "
            "&& exec /opt/rust/bin/rustc -O --edition 2021 -o candidate candidate.rs",
        ),
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
            ("CGO_ENABLED", "0"),  # no C constructors running before the prelude
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
    key = canonical_language(name)
    if key is None:
        raise InvalidArgument(f"unknown language {name!r} (known: {', '.join(LANGUAGES)})")
    if key not in languages:
        raise Unimplemented(
            f"language {key!r} has no toolchain on this verifier "
            f"(available: {', '.join(sorted(languages)) or 'none'})"
        )
    return languages[key]


# --- assert-style harnesses ---------------------------------------------------------------------


def compose_assert_program(lang: Language, candidate: str, harness: str) -> dict[str, str]:
    """The files of one assert-style program ({file name: text}).

    Python, C++ and Rust: a judge that runs the harness and the candidate as a process of its own
    (rlx_verifier.assert_python, rlx_verifier.assert_native); AC iff the judge exits 0. Go: the
    candidate, the harness and code that writes the per-request marker only at the harness's
    end; the marker is in none of these files (the program reads it from the first line of its
    stdin before any candidate code runs, see the README) and AC needs exit status 0 and the
    marker as stdout's last line.
    """
    if lang.name == "python":
        # two processes, no marker: see rlx_verifier.assert_python
        return assert_python.compose(lang.source, candidate, harness)
    if lang.name in ("cpp", "rust"):
        # two programs, no marker: see rlx_verifier.assert_native
        compose = compose_cpp if lang.name == "cpp" else compose_rust
        try:
            return compose(candidate, harness)
        except ValueError as e:
            raise InvalidArgument(str(e), field="harness") from e
    if lang.name == "go":
        if not lang.test_compile:
            raise Unimplemented(
                "assert-style Go needs testify in /usr/share/gocode "
                "(Debian: golang-github-stretchr-testify-dev)"
            )
        return _compose_go(candidate, harness)
    raise Unimplemented(f"assert-style judging is not available for {lang.name}")


_GO_PACKAGE = re.compile(r"^\s*package\s+\w+\s*;?\s*$", re.MULTILINE)
_GO_IMPORT = re.compile(r'^\s*import\s*(\([^)]*\)|(?:[\w.]+\s+)?"[^"]*")', re.MULTILINE)
_GO_SPEC = re.compile(r'(?:([\w.]+)\s+)?"([^"]+)"')
_GO_TEST = re.compile(r"^func\s+(Test\w+)\s*\(\s*\w+\s+\*testing\.T\s*\)", re.MULTILINE)


def _go_split(source: str) -> tuple[list[tuple[str, str]], str]:
    """(import specs as (alias, path), the source without its package clause and imports)."""
    specs = [m for decl in _GO_IMPORT.findall(source) for m in _GO_SPEC.findall(decl)]
    rest = _GO_IMPORT.sub("", _GO_PACKAGE.sub("", source))
    return specs, rest


# The Go prelude sorts before the candidate's file and its variable depends on nothing of the
# candidate's, so it is initialised before any candidate variable or init() runs. The closure it
# returns holds the marker; it writes it only when called by this package's TestMain called by
# the test binary's main, so a candidate calling it (or TestMain) itself gets nothing.
_GO_PRELUDE = r"""package main

import (
    "flag"
    "io"
    "os"
    "runtime"
    "strings"
    "syscall"
    "testing"
)

var rlxFinish = rlxPrelude()

//go:noinline
func rlxPrelude() func(int) int {
    mark, b := []byte{'\n'}, []byte{0}
    for len(mark) < 64 {
        if n, err := syscall.Read(0, b); n != 1 || err != nil {
            os.Exit(99)
        }
        mark = append(mark, b[0])
        if b[0] == '\n' {
            break
        }
    }
    if mark[len(mark)-1] != '\n' {
        os.Exit(99)
    }
    fd, err := syscall.Open("/tmp", syscall.O_RDWR|0x410000, 0o600) // O_TMPFILE
    if err != nil {
        os.Exit(99)
    }
    rest := os.NewFile(uintptr(fd), "stdin")
    if _, err := io.Copy(rest, os.Stdin); err != nil {
        os.Exit(99)
    }
    if _, err := syscall.Seek(fd, 0, 0); err != nil || syscall.Dup3(fd, 0, 0) != nil {
        os.Exit(99)
    }
    rest.Close()
    pc, _, _, _ := runtime.Caller(0)
    name := runtime.FuncForPC(pc).Name()
    testMain := name[:strings.LastIndex(name, ".")+1] + "TestMain"
    return func(code int) int {
        pcs := make([]uintptr, 8)
        frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
        caller, _ := frames.Next()
        outer, _ := frames.Next()
        if caller.Function != testMain || outer.Function != "main.main" {
            return 97
        }
        if code == 0 {
            if _, err := os.Stdout.Write(mark); err != nil {
                return 98
            }
        }
        return code
    }
}

//go:noinline
func TestMain(m *testing.M) {
    os.Args = os.Args[:1]
    for name, value := range map[string]string{
        "test.run": "{run}", "test.skip": "", "test.list": "", "test.bench": "",
        "test.fuzz": "", "test.count": "1", "test.shuffle": "off", "test.failfast": "false",
        "test.cpu": "",
    } {
        f := flag.Lookup(name)
        if f == nil && (name == "test.run" || name == "test.count" || name == "test.list") {
            os.Exit(97)
        }
        if f != nil && f.Value.Set(value) != nil {
            os.Exit(97)
        }
    }
    os.Exit(rlxFinish(m.Run()))
}
"""


def _compose_go(candidate: str, harness: str) -> dict[str, str]:
    """Package main as a test binary: one file with the candidate and the harness (`func
    TestX(t *testing.T)`) sharing their imports, as HumanEval-X writes them, and the prelude with
    a TestMain that runs exactly the harness's tests and has the marker written only when every
    one passed."""
    names = _GO_TEST.findall(harness)
    if not names:
        raise InvalidArgument("a Go harness needs at least one func TestX(t *testing.T)")
    cand_specs, cand = _go_split(candidate)
    test_specs, test = _go_split(harness)
    specs = list(dict.fromkeys(test_specs + cand_specs))
    imports = "".join(f'    {a + " " if a else ""}"{p}"\n' for a, p in specs)
    program = f"package main\n\nimport (\n{imports})\n{cand}\n{test}\n"
    prelude = _GO_PRELUDE.replace("{run}", f"^({'|'.join(names)})$")
    return {"main_test.go": program, "0_rlx_prelude_test.go": prelude}
