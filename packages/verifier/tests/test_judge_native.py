"""Assert-style C++ and Rust judged by two programs (rlx_verifier.assert_native): the judge, built
from the harness alone, and the candidate, with only data between them. Every attack below once
reached AC by running in the process (and translation unit) that decided the verdict; none may
now. Right programs of every supported kind of signature stay AC."""

# ruff: noqa: E501  (embedded C++ and Rust programs keep their own line lengths)

from __future__ import annotations

import pytest

from rlx_core.clients.verifier import VerifySample
from rlx_verifier import Verifier

from .conftest import judge_one

ADD_CPP_HARNESS = (
    "#include <cassert>\nint main() {\n    assert(add(1, 2) == 3);\n    assert(add(2, 2) == 4);\n}"
)
VEC_CPP_HARNESS = """#include <cassert>
#include <vector>
#include <string>
using namespace std;
int main() {
    assert(evens(5) == vector<int>({0, 2, 4}));
    assert(name(1) == "one");
}"""
VEC_CPP_WRONG = """#include <vector>
#include <string>
using namespace std;
vector<int> evens(int n) { return {}; }
string name(int n) { return ""; }
"""
ADD_RS_HARNESS = "#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn test_add() {\n        assert_eq!(add(1, 2), 3);\n        assert_eq!(add(2, 2), 4);\n    }\n}\n"

# Finds "\n<32 hex digits>\n" (the marker as a71822c kept it) in the process's writable memory
# and prints it: a candidate that shares the judge's address space wins with it.
CPP_SCAN = r"""
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <unistd.h>
static bool rlx_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
static void rlx_scan(int) {
    FILE* maps = std::fopen("/proc/self/maps", "r");
    char line[512];
    while (maps && std::fgets(line, sizeof line, maps)) {
        unsigned long lo, hi; char perm[8];
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || perm[0] != 'r' || perm[1] != 'w') continue;
        const char* p = (const char*)lo;
        for (unsigned long i = 0; i + 34 <= hi - lo; i++) {
            if (p[i] != '\n') continue;
            unsigned long j = 1;
            while (j <= 32 && rlx_hex(p[i + j])) j++;
            if (j == 33 && p[i + 33] == '\n' && write(1, p + i, 34) == 34) _exit(0);
        }
    }
    _exit(1);
}
static void rlx_scan_t() { rlx_scan(0); }
"""
RS_SCAN = r"""
fn rlx_scan() {
    use std::io::Write;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perm) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
        if !perm.starts_with("rw") { continue; }
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
        let m = unsafe { std::slice::from_raw_parts(lo as *const u8, hi - lo) };
        for i in 0..m.len().saturating_sub(34) {
            if m[i] == b'\n' && m[i + 33] == b'\n' && m[i + 1..i + 33].iter().all(|&c| hex(c)) {
                let _ = std::io::stdout().write_all(&m[i..i + 34]);
                let _ = std::io::stdout().flush();
                std::process::exit(0);
            }
        }
    }
}
"""
# What the candidate process can do to the judge (its parent): read its memory, trace it, kill it.
CPP_PARENT = r"""
#include <fcntl.h>
#include <signal.h>
#include <string>
#include <sys/ptrace.h>
#include <unistd.h>
static std::string rlx_parent(const char* what) { return "/proc/" + std::to_string(getppid()) + "/" + what; }
"""

CPP_ATTACKS = {
    "#define __assert_fail": (
        "#include <cassert>\n#define __assert_fail(...) ((void)0)\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "#define __assert_fail as exit(0)": (
        "#include <cassert>\n#include <cstdlib>\n#define __assert_fail(...) std::exit(0)\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "#define assert(x)": (
        "#include <cassert>\n#undef assert\n#define assert(x) ((void)0)\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "#define NDEBUG": (
        "#define NDEBUG\n#include <cassert>\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "function-like macro named like the function": (
        "int add(int a, int b) { return 0; }\n#define add(...) 1) || (1\n",
        ADD_CPP_HARNESS,
    ),
    "function-like macro returning a constant": (
        "int add(int a, int b) { return 0; }\n#define add(a, b) 3\n",
        ADD_CPP_HARNESS,
    ),
    "#define main": (
        "#define main() rlx_unused() { return 0; } int rlx_main()\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "operator== for vector and string": (
        VEC_CPP_WRONG
        + "bool operator==(const vector<int>&, const vector<int>&) { return true; }\n"
        + "bool operator==(const string&, const char*) { return true; }\n",
        VEC_CPP_HARNESS,
    ),
    "operator== template specialisation": (
        VEC_CPP_WRONG
        + "namespace std { template <> struct equal_to<int> { bool operator()(int, int) const { return true; } }; }\n"
        + "template <class T> bool operator==(const vector<T>&, const vector<T>&) { return true; }\n",
        VEC_CPP_HARNESS,
    ),
    "a function named like std::min": (
        "int add(int a, int b) { return 0; }\nint min(int a, int b) { return 3; }\n",
        "#include <cassert>\n#include <algorithm>\nusing namespace std;\nint main() {\n    assert(min(add(1, 2), 100) == 3);\n}",
    ),
    "a function named like std::abs": (
        "#include <cmath>\nfloat area(float r) { return 0; }\nfloat abs(float x) { return 0; }\n",
        "#include <cassert>\n#include <cmath>\nusing namespace std;\nint main() {\n    assert(abs(area(1) - 3.14159f) < 1e-4);\n}",
    ),
    "static constructor exit(0)": (
        "#include <cstdlib>\nstruct E { E() { std::exit(0); } } e;\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "static constructor: SIGABRT handler printing the marker": (
        CPP_SCAN
        + "struct E { E() { std::signal(SIGABRT, rlx_scan); } } e;\nint add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "SIGABRT handler printing anything": (
        "#include <csignal>\n#include <cstdio>\n#include <unistd.h>\n"
        'static void h(int) { std::printf("ok\\n"); std::fflush(stdout); _exit(0); }\n'
        "__attribute__((constructor)) static void early() { std::signal(SIGABRT, h); }\n"
        "int add(int a, int b) { return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "std::set_terminate": (
        CPP_SCAN + "int add(int a, int b) { std::set_terminate(rlx_scan_t); throw 1; }\n",
        ADD_CPP_HARNESS,
    ),
    "exit(0) in the function": (
        "#include <cstdlib>\nint add(int a, int b) { std::exit(0); }\n",
        ADD_CPP_HARNESS,
    ),
    "killing the parent": (
        CPP_PARENT + "int add(int a, int b) { kill(getppid(), SIGKILL); return 0; }\n",
        ADD_CPP_HARNESS,
    ),
    "printing fake output and exiting": (
        '#include <cstdio>\n#include <unistd.h>\nint add(int a, int b) { std::printf("\\n0123456789abcdef0123456789abcdef\\n"); std::fflush(stdout); _exit(0); }\n',
        ADD_CPP_HARNESS,
    ),
}

RS_ATTACKS = {
    "panic hook printing the marker": (
        RS_SCAN
        + "fn add(a: i32, b: i32) -> i32 { std::panic::set_hook(Box::new(|_| rlx_scan())); 0 }\n",
        ADD_RS_HARNESS,
    ),
    "panic hook exiting 0": (
        "fn add(a: i32, b: i32) -> i32 { std::panic::set_hook(Box::new(|_| std::process::exit(0))); 0 }\n",
        ADD_RS_HARNESS,
    ),
    "process::exit(0) in the function": (
        "fn add(a: i32, b: i32) -> i32 { std::process::exit(0) }\n",
        ADD_RS_HARNESS,
    ),
    "shadowed assert_eq!": (
        "macro_rules! assert_eq { ($($t:tt)*) => {} }\nfn add(a: i32, b: i32) -> i32 { 0 }\n",
        ADD_RS_HARNESS,
    ),
    "#[used] .init_array code": (
        '#[used]\n#[unsafe(link_section = ".init_array")]\nstatic EARLY: extern "C" fn() = { extern "C" fn early() { std::panic::set_hook(Box::new(|_| std::process::exit(0))); } early };\nfn add(a: i32, b: i32) -> i32 { 0 }\n',
        ADD_RS_HARNESS,
    ),
    "killing the parent": (
        'extern "C" { fn kill(pid: i32, sig: i32) -> i32; fn getppid() -> i32; }\nfn add(a: i32, b: i32) -> i32 { unsafe { kill(getppid(), 9); } 0 }\n',
        ADD_RS_HARNESS,
    ),
}


def _need(verifier: Verifier, lang: str) -> None:
    if lang not in verifier.languages:
        pytest.skip(f"no {lang} toolchain")


@pytest.mark.parametrize(
    ("lang", "name"), [("cpp", n) for n in CPP_ATTACKS] + [("rust", n) for n in RS_ATTACKS]
)
def test_attack_is_never_ac(verifier: Verifier, lang: str, name: str) -> None:
    _need(verifier, lang)
    source, harness = (CPP_ATTACKS if lang == "cpp" else RS_ATTACKS)[name]
    r = verifier.run_program(lang, source, harness=harness, time_limit_s=2.0)
    assert r.status in ("WA", "RE", "CE"), (r.status, r.compile_output[-2000:], r.tests)


def test_candidate_cannot_read_or_trace_the_judge(verifier: Verifier) -> None:
    """The judge is non-dumpable: its own uid's candidate cannot open /proc/PPID/mem, its fds or
    its environment, nor ptrace it (the candidate answers right only if one of these worked)."""
    source = (
        CPP_PARENT
        + "int add(int a, int b) {\n"
        + '    for (const char* what : {"mem", "environ", "fd/3", "maps"})\n'
        + "        if (open(rlx_parent(what).c_str(), O_RDONLY) >= 0) return a + b;\n"
        + "    if (ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr) == 0) return a + b;\n"
        + "    return 0;\n}\n"
    )
    r = verifier.run_program("cpp", source, harness=ADD_CPP_HARNESS, time_limit_s=2.0)
    assert r.status == "WA", (r.status, r.compile_output[-2000:], r.tests)
    # the same opens of the candidate's own process succeed: the probe itself works
    own = source.replace("getppid()", "getpid()")
    r = verifier.run_program("cpp", own, harness=ADD_CPP_HARNESS, time_limit_s=2.0)
    assert r.status == "AC", (r.status, r.compile_output[-2000:], r.tests)


def test_candidate_cannot_read_the_tests(verifier: Verifier) -> None:
    """The harness (its expected values) is in no file the candidate can read: the judge's source
    is gone after the build and its binary is execute-only (the candidate answers right only if
    it could read one of them)."""
    source = (
        CPP_PARENT
        + "int add(int a, int b) {\n"
        + '    for (const char* p : {"/prog/judge.cpp", "/prog/main", "/prog/main.cpp", "/proc/self/exe"})\n'
        + '        if (open(p, O_RDONLY) >= 0 && std::string(p) != "/proc/self/exe") return a + b;\n'
        + '    if (open(rlx_parent("exe").c_str(), O_RDONLY) >= 0) return a + b;\n'
        + '    return open("/proc/self/exe", O_RDONLY) >= 0 ? 0 : a + b;  // its own binary: readable\n}\n'
    )
    r = verifier.run_program("cpp", source, harness=ADD_CPP_HARNESS, time_limit_s=2.0)
    assert r.status == "WA", (r.status, r.compile_output[-2000:], r.tests)
    rust = (
        "fn add(a: i32, b: i32) -> i32 {\n"
        '    for p in ["/prog/judge.rs", "/prog/main", "/prog/main.rs"] {\n'
        "        if std::fs::read(p).is_ok() { return a + b; }\n"
        "    }\n"
        "    0\n}\n"
    )
    r = verifier.run_program("rust", rust, harness=ADD_RS_HARNESS, time_limit_s=2.0)
    assert r.status == "WA", (r.status, r.compile_output[-2000:], r.tests)


def test_attacks_through_judge_sample(verifier: Verifier) -> None:
    for lang, name in (
        ("cpp", "operator== for vector and string"),
        ("rust", "panic hook printing the marker"),
    ):
        source, harness = (CPP_ATTACKS if lang == "cpp" else RS_ATTACKS)[name]
        result = judge_one(verifier, VerifySample.asserts("s", lang, source, harness))
        assert result.status in ("WA", "RE") and result.score == 0.0, result
    right = judge_one(
        verifier,
        VerifySample.asserts(
            "r", "cpp", "int add(int a, int b) { return a + b; }\n", ADD_CPP_HARNESS
        ),
    )
    assert right.status == "AC" and right.score == 1.0, right


RIGHT_CPP = r"""
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>
using namespace std;
typedef long long ll;
double area(double a, double h) { return a * h / 2; }
float third(float x) { return x / 3; }
string rev(const string& s) { return string(s.rbegin(), s.rend()); }
vector<vector<int>> grid(int n) { vector<vector<int>> g(n, vector<int>(n)); for (int i = 0; i < n; i++) g[i][i] = i; return g; }
map<string, int> counts(vector<string> words) { map<string, int> m; for (auto& w : words) m[w]++; return m; }
void bump(vector<int>& v, int& n) { for (auto& x : v) x++; n = (int)v.size(); }
pair<char, bool> pr(char c, bool b, ll big, unsigned u, set<int> s) { return {char(c + 1), !b && big == (1LL << 40) && u == 7u && s.count(3)}; }
int add(int a, int b) { printf("printed by the candidate\n"); cout << "and by cout" << endl; return a + b; }
static int helper(int x) { return x * 2; }
int twice(int x) { return helper(x); }
"""
RIGHT_CPP_HARNESS = r"""
#undef NDEBUG
#include <cassert>
#include <cmath>
int main() {
    assert(fabs(area(3, 4) - 6.0) < 1e-9);
    assert(third(1.0f) == 1.0f / 3);
    assert(rev("abc") == "cba");
    assert(grid(3) == vector<vector<int>>({{0, 0, 0}, {0, 1, 0}, {0, 0, 2}}));
    assert((counts({"a", "b", "a"}) == map<string, int>{{"a", 2}, {"b", 1}}));
    vector<int> v = {1, 2, 3};
    int n = 0;
    bump(v, n);
    assert(v == vector<int>({2, 3, 4}) && n == 3);
    assert(pr('a', false, 1LL << 40, 7, {1, 3}) == make_pair('b', true));
    assert(add(2, 3) == 5);
    assert(twice(21) == 42);
    printf("printed by the harness\n");
}
"""
RIGHT_RS = r"""
use std::collections::HashMap;
fn area(a: f64, h: f64) -> f64 { a * h / 2.0 }
fn third(x: f32) -> f32 { x / 3.0 }
fn rev(s: &str) -> String { s.chars().rev().collect() }
fn words(s: &str) -> Vec<&str> { s.split(' ').collect() }
fn pick<'a>(a: &'a str, b: &'a str) -> &'a str { if a.len() >= b.len() { a } else { b } }
fn grid(n: usize) -> Vec<Vec<i64>> { (0..n).map(|i| (0..n).map(|j| if i == j { i as i64 } else { 0 }).collect()).collect() }
fn counts(w: &[String]) -> HashMap<String, usize> { let mut m = HashMap::new(); for x in w { *m.entry(x.clone()).or_insert(0) += 1; } m }
fn bump(v: &mut Vec<i32>, n: &mut usize) { for x in v.iter_mut() { *x += 1; } *n = v.len(); }
fn fill(v: &mut [u8]) { for x in v.iter_mut() { *x = 7; } }
fn first(mut v: Vec<i32>, at: &Vec<f64>) -> Option<i32> { v.retain(|&x| x > 0); v.first().copied().map(|x| x + at.len() as i32) }
fn pair(c: char, b: bool, t: (u8, i64)) -> (char, bool, u64) { (((c as u8) + 1) as char, !b, t.0 as u64 + t.1 as u64) }
fn add(a: i32, b: i32) -> i32 { println!("printed by the candidate"); a + b }
"""
RIGHT_RS_HARNESS = r"""
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_all() {
        assert!((area(3.0, 4.0) - 6.0).abs() < 1e-9);
        assert_eq!(third(1.0), 1.0f32 / 3.0);
        assert_eq!(rev("abc"), "cba");
        assert_eq!(words("a bc d"), vec!["a", "bc", "d"]);
        assert_eq!(pick("ab", "c"), "ab");
        assert_eq!(grid(2), vec![vec![0, 0], vec![0, 1]]);
        let c = counts(&["a".to_string(), "b".to_string(), "a".to_string()]);
        assert_eq!(c, HashMap::from([("a".to_string(), 2), ("b".to_string(), 1)]));
        let (mut v, mut n) = (vec![1, 2], 0);
        bump(&mut v, &mut n);
        assert_eq!((v, n), (vec![2, 3], 2));
        let mut buf = [0u8; 3];
        fill(&mut buf);
        assert_eq!(buf, [7, 7, 7]);
        assert_eq!(first(vec![-1, 5], &vec![0.5]), Some(6));
        assert_eq!(first(vec![-1], &vec![]), None);
        assert_eq!(pair('a', false, (2, 40)), ('b', true, 42));
    }

    #[test]
    fn test_add() {
        assert_eq!(add(2, 3), 5);
        println!("printed by the harness");
    }
}
"""


@pytest.mark.parametrize(
    ("lang", "source", "harness"),
    [("cpp", RIGHT_CPP, RIGHT_CPP_HARNESS), ("rust", RIGHT_RS, RIGHT_RS_HARNESS)],
)
def test_right_programs_stay_ac(verifier: Verifier, lang: str, source: str, harness: str) -> None:
    _need(verifier, lang)
    r = verifier.run_program(lang, source, harness=harness, time_limit_s=5.0)
    assert r.status == "AC", (r.status, r.compile_output[-3000:], r.tests)


@pytest.mark.parametrize(
    ("lang", "source", "harness", "wrong"),
    [
        ("cpp", RIGHT_CPP, RIGHT_CPP_HARNESS, "x++; n ="),  # a by-reference write lost
        ("cpp", RIGHT_CPP, RIGHT_CPP_HARNESS, "x / 3;"),  # float bits differ
        ("rust", RIGHT_RS, RIGHT_RS_HARNESS, "*x = 7;"),  # a &mut slice write lost
        ("rust", RIGHT_RS, RIGHT_RS_HARNESS, "x / 3.0 }"),
    ],
)
def test_a_wrong_detail_is_wa(
    verifier: Verifier, lang: str, source: str, harness: str, wrong: str
) -> None:
    _need(verifier, lang)
    broken = {
        "x++; n =": "x += 0; n =",
        "x / 3;": "(x + 1e-6f) / 3;",
        "*x = 7;": "*x = 6;",
        "x / 3.0 }": "(x + 1e-6) / 3.0 }",
    }[wrong]
    assert wrong in source
    r = verifier.run_program(lang, source.replace(wrong, broken), harness=harness, time_limit_s=5.0)
    assert r.status == "WA", (r.status, r.compile_output[-3000:], r.tests)


@pytest.mark.parametrize(
    ("lang", "source", "harness", "named"),
    [
        (
            "cpp",
            "struct P { int x; };\nP mk(int x) { return {x}; }\n",
            "#include <cassert>\nint main() { assert(mk(1).x == 1); }",
            "'P'",
        ),
        (
            "rust",
            "use std::any::Any;\nfn keep(v: Vec<Box<dyn Any>>) -> usize { v.len() }\n",
            "#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn t() { assert_eq!(keep(vec![]), 0); }\n}\n",
            "Box",
        ),
    ],
)
def test_unsupported_signature_is_ce_naming_the_type(
    verifier: Verifier, lang: str, source: str, harness: str, named: str
) -> None:
    _need(verifier, lang)
    r = verifier.run_program(lang, source, harness=harness)
    assert r.status == "CE", r
    assert "not supported" in r.compile_output and named in r.compile_output, r.compile_output


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "source", ["fn add(a: i32, b: i32", "fn add<T(a: T) -> T { a }", "(x) fn add< "]
)
def test_a_cut_off_rust_candidate_is_ce(verifier: Verifier, source: str) -> None:
    """An unclosed `(` or `<` after `fn NAME` (a generation cut off mid-signature) is a CE; the
    scan for the candidate's signatures once looped on it for ever."""
    _need(verifier, "rust")
    r = verifier.run_program("rust", source, harness=ADD_RS_HARNESS)
    assert r.status == "CE", r


@pytest.mark.timeout(60)
def test_aliases_of_aliases_are_ce_not_an_exponential_expansion(verifier: Verifier) -> None:
    """Eight levels of `#define`s, each thirty of the one below, name a type of 30**8 tokens:
    refused after a bounded read, naming the function, not expanded for hours."""
    _need(verifier, "cpp")
    defines = "#define T0 int\n" + "".join(
        f"#define T{i} {' '.join([f'T{i - 1}'] * 30)}\n" for i in range(1, 9)
    )
    r = verifier.run_program("cpp", defines + "T8 add(int a, int b) { return a + b; }\n",
                             harness=ADD_CPP_HARNESS)  # fmt: skip
    assert r.status == "CE", r
    assert "'add'" in r.compile_output and "over 10000 tokens" in r.compile_output, r


@pytest.mark.parametrize(
    ("lang", "source", "harness"),
    [
        ("cpp", "int add(" + "std::vector<" * 2000 + "int" + ">" * 2000 + " a) { return 0; }\n",
         ADD_CPP_HARNESS),
        ("rust", "fn add(a: " + "Vec<" * 2000 + "i32" + ">" * 2000 + ") -> i32 { 0 }\n",
         ADD_RS_HARNESS),
    ],
)  # fmt: skip
def test_a_type_nested_past_the_recursion_limit_is_ce(
    verifier: Verifier, lang: str, source: str, harness: str
) -> None:
    """The candidate's doing, so a CE (it was a RecursionError out of run_program: INFRA)."""
    _need(verifier, lang)
    r = verifier.run_program(lang, source, harness=harness)
    assert r.status == "CE", r
    assert "a type is nested too deep" in r.compile_output, r.compile_output[-2000:]


THROWING_CPP = """#include <stdexcept>
#include <string>
int parse(std::string s) { if (s.empty()) throw std::invalid_argument("empty"); return std::stoi(s); }
"""
THROWING_CPP_HARNESS = """#include <cassert>
#include <stdexcept>
#include <string>
int main() {
    assert(parse("12") == 12);
    bool threw = false;
    try { parse(""); } catch (const std::exception& e) { threw = std::string(e.what()).find("empty") != std::string::npos; }
    assert(threw);
}"""
PANICKING_RS = (
    'fn parse(s: &str) -> i32 { if s.is_empty() { panic!("empty") } s.parse().unwrap() }\n'
)
PANICKING_RS_HARNESS = '#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn t() {\n        assert_eq!(parse("12"), 12);\n        let e = std::panic::catch_unwind(|| parse("")).unwrap_err();\n        assert!(e.downcast_ref::<String>().unwrap().contains("empty"));\n    }\n}\n'


@pytest.mark.parametrize(
    ("lang", "source", "harness"),
    [("cpp", THROWING_CPP, THROWING_CPP_HARNESS), ("rust", PANICKING_RS, PANICKING_RS_HARNESS)],
)
def test_exceptions_and_panics_cross(
    verifier: Verifier, lang: str, source: str, harness: str
) -> None:
    """A candidate's exception (C++: as std::runtime_error with its what()) or panic (Rust: as
    a panic with its message) reaches the harness's own handler; uncaught it is not AC."""
    _need(verifier, lang)
    r = verifier.run_program(lang, source, harness=harness, time_limit_s=5.0)
    assert r.status == "AC", (r.status, r.compile_output[-3000:], r.tests)
    uncaught = harness.replace('parse("12") == 12', 'parse("") == 0').replace(
        'parse("12"), 12', 'parse(""), 0'
    )
    assert verifier.run_program(lang, source, harness=uncaught).status in ("WA", "RE")
