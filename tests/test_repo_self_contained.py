"""A clone of the repository alone runs its own tests: no tracked file reads a path outside the
repository root (issue 41). The test data lives in `testdata/`.

A static scan of every tracked code file (Python, TOML, shell scripts, INI/YAML, and the code
blocks of Markdown files) for the ways a path leaves the root:

- `shared` joined with `data`, or `../shared`: the folder beside the development checkout;
- `Path(__file__)...parents[N]` or `.parent` chains that climb above the root (the file's depth
  decides how far is too far), and `.parent` or `".."` taken of a name bound to the root;
- shell `$(dirname "$0")/../..` (or a variable holding the script's folder) climbing above it;
- TOML strings and Markdown code blocks starting with more `../` than the file is deep (Markdown
  commands run from the root, so any `../` there leaves it).

This file quotes the lines it must catch, so it is the one file the scan skips.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = PurePosixPath(Path(__file__).resolve().relative_to(ROOT).as_posix())
CODE_SUFFIXES = {".py", ".pyi", ".toml", ".sh", ".cfg", ".ini", ".yml", ".yaml"}

SHARED = re.compile(r"""shared['"]?\s*[/,]\s*['"]?data\b|\.\./shared\b""")
FILE_PARENTS = re.compile(r"__file__\)(?:\.resolve\(\)|\.absolute\(\))?\.parents\[(\d+)\]")
FILE_PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\)|\.absolute\(\))?((?:\.parent\b)+)")
ROOT_NAME = re.compile(
    r"^\s*(\w+)\s*=\s*Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?\.parents\[(\d+)\]\s*$"
)
SCRIPT_DIR = r"""\$\(dirname\s+"?\$(?:0|\{BASH_SOURCE\[0\]\})"?\)"""
SCRIPT_DIR_VAR = re.compile(rf"""^\s*(\w+)="?\$\(cd\s+"?{SCRIPT_DIR}"?\s*&&\s*pwd\)"?\s*$""")
TOML_STRING = re.compile(r"""["']((?:\.\./)+)""")
FENCE = re.compile(r"^\s*(```|~~~)")


def _depth(rel: PurePosixPath) -> int:
    """How many folders hold the file below the root: `Path(file).parents[depth]` is the root."""
    return len(rel.parts) - 1


def _python(rel: PurePosixPath, lines: list[str]) -> list[tuple[int, str]]:
    depth, bad = _depth(rel), []
    roots = {
        m.group(1) for line in lines if (m := ROOT_NAME.match(line)) and int(m.group(2)) == depth
    }
    at_root = [re.compile(rf"\b{n}\.parents?\b|\b{n}\s*[/,]\s*['\"]\.\.") for n in roots]
    for i, line in enumerate(lines, 1):
        if any(int(n) > depth for n in FILE_PARENTS.findall(line)):
            bad.append((i, "parents[N] above the repository root"))
        if any(chain.count(".parent") > depth + 1 for chain in FILE_PARENT_CHAIN.findall(line)):
            bad.append((i, ".parent chain above the repository root"))
        if any(p.search(line) for p in at_root):
            bad.append((i, "a path above the repository root"))
    return bad


def _shell(rel: PurePosixPath, lines: list[str]) -> list[tuple[int, str]]:
    depth, bad = _depth(rel), []
    here = [m.group(1) for line in lines if (m := SCRIPT_DIR_VAR.match(line))]
    starts = [SCRIPT_DIR] + [rf"\$\{{?{v}\}}?" for v in here]
    climb = re.compile(rf"""(?:{"|".join(starts)})"?/((?:\.\./)*\.\.)(?![\w.])""")
    for i, line in enumerate(lines, 1):
        if any(m.count("..") > depth for m in climb.findall(line)):
            bad.append((i, "climbs above the repository root"))
    return bad


def _toml(rel: PurePosixPath, lines: list[str]) -> list[tuple[int, str]]:
    depth = _depth(rel)
    return [
        (i, "a path above the repository root")
        for i, line in enumerate(lines, 1)
        if any(m.count("..") > depth for m in TOML_STRING.findall(line))
    ]


def _markdown_code(lines: list[str]) -> list[tuple[int, str]]:
    bad, inside = [], False
    for i, line in enumerate(lines, 1):
        if FENCE.match(line):
            inside = not inside
        elif inside and ("../" in line or SHARED.search(line)):
            bad.append((i, "a code block reads a path outside the repository"))
    return bad


def findings(rel: str, text: str) -> list[str]:
    """'path:line: why' for every place the file at `rel` (from the root) reads outside the root."""
    path, lines = PurePosixPath(rel), text.splitlines()
    if path.suffix == ".md":
        bad = _markdown_code(lines)
    else:
        bad = [(i, "the shared folder beside the checkout") for i, line in enumerate(lines, 1)
               if SHARED.search(line)]  # fmt: skip
        if path.suffix in (".py", ".pyi"):
            bad += _python(path, lines)
        elif path.suffix == ".toml":
            bad += _toml(path, lines)
        elif path.suffix == ".sh" or (lines and lines[0].startswith("#!") and "sh" in lines[0]):
            bad += _shell(path, lines)
    return [f"{rel}:{i}: {why}: {lines[i - 1].strip()}" for i, why in sorted(bad)]


def _tracked_code() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    # A file deleted in the working tree but still in the index is not there to read.
    files = [f for f in out.split("\0") if f and PurePosixPath(f) != SELF and (ROOT / f).is_file()]
    shebang = [f for f in files if not PurePosixPath(f).suffix and _starts_with_shebang(ROOT / f)]
    keep = CODE_SUFFIXES | {".md"}
    return [f for f in files if PurePosixPath(f).suffix in keep] + shebang


def _starts_with_shebang(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def test_no_tracked_file_reads_outside_the_repository() -> None:
    files = _tracked_code()
    assert "tests/conftest.py" in files and ".ci/run" in files  # the scan sees code and scripts
    bad = [b for f in files for b in findings(f, (ROOT / f).read_text(encoding="utf-8"))]
    assert not bad, "tracked files read outside the repository:\n" + "\n".join(bad)


def test_the_test_data_is_in_the_repository() -> None:
    for name in ("math/gsm8k_test.jsonl", "math/math500_test.jsonl", "code/humaneval_cpp.jsonl.gz",
                 "code/humaneval_rust.jsonl.gz", "code/humaneval_go.jsonl.gz",
                 "code/code_contests_sample.jsonl", "code/mbpp_sample.jsonl"):  # fmt: skip
        assert (ROOT / "testdata" / name).stat().st_size > 10_000, name
        assert f"`{name}`" in (ROOT / "testdata" / "README.md").read_text(), name


# The lines that read the folder beside the checkout at a71822c, verbatim, in their files.
OLD = [
    ("packages/controller/tests/test_datasets_formats.py",
     'DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "math"'),
    ("tests/test_dataset_gold_answers.py",
     'DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "math"'),
    ("tests/test_readme_example.py",
     'ROOT = Path(__file__).resolve().parents[1]\n'
     'GSM8K = ROOT.parent / "shared" / "data" / "math" / "gsm8k_test.jsonl"'),
    ("tests/test_up_hf_checkpoint.py",
     'ROOT = Path(__file__).resolve().parents[1]\n'
     'GSM8K = ROOT.parent / "shared" / "data" / "math" / "gsm8k_test.jsonl"'),
    ("packages/verifier/tests/conftest.py",
     'DATA = Path(__file__).resolve().parents[4] / "shared" / "data"'),
]  # fmt: skip


@pytest.mark.parametrize(("rel", "text"), OLD, ids=[rel for rel, _ in OLD])
def test_the_old_reads_of_the_shared_folder_are_caught(rel: str, text: str) -> None:
    bad = findings(rel, text)
    assert bad and all(b.startswith(f"{rel}:") for b in bad)
    # Without the folder's name, the climb out of the root alone is caught too.
    assert findings(rel, text.replace('"shared" / "data"', '"other"'))


@pytest.mark.parametrize(
    ("rel", "text", "caught"),
    [
        # parents[N]: a file two folders deep reaches the root with parents[2], leaves with [3].
        ("tests/x.py", "R = Path(__file__).resolve().parents[1]", False),
        ("tests/x.py", "R = Path(__file__).resolve().parents[2]", True),
        ("a/b/x.py", "R = Path(__file__).resolve().parents[2]", False),
        ("a/b/x.py", "R = Path(__file__).resolve().parents[3]", True),
        ("x.py", "R = Path(__file__).resolve().parents[0]", False),
        ("x.py", "R = Path(__file__).resolve().parents[1]", True),
        ("a/b/x.py", "R = Path(__file__).parent.parent.parent", False),
        ("a/b/x.py", "R = Path(__file__).resolve().parent.parent.parent.parent", True),
        ("a/b/x.py", 'R = Path(__file__).resolve().parents[2]\nX = R / "tools"', False),
        ("a/b/x.py", 'R = Path(__file__).resolve().parents[2]\nX = R / ".." / "y"', True),
        ("a/b/x.py", 'R = Path(__file__).resolve().parents[2]\nX = R.parent / "y"', True),
        ("a/b/x.py", 'R = Path(__file__).resolve().parents[1]\nX = R.parent / "y"', False),
        ("a/x.py", 'key = "a/../b"  # a storage key, not a path read', False),
        # shell: a script two folders deep reaches the root with ../.., leaves with ../../..
        (".ci/run", '#!/usr/bin/env bash\ncd "$(dirname "$0")/.."', False),
        (".ci/run", '#!/usr/bin/env bash\ncd "$(dirname "$0")/../.."', True),
        (
            "a/b/c/r.sh",
            'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'root="$(cd "$here/../../.." && pwd)"',
            False,
        ),
        (
            "a/b/c/r.sh",
            'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'x="$(cd "$here/../../../.." && pwd)"',
            True,
        ),
        # TOML paths are relative to the file's folder.
        ("a/pyproject.toml", 'x = { path = "../b" }', False),
        ("a/pyproject.toml", 'x = { path = "../../b" }', True),
        # Markdown: only code blocks, and any ../ there (commands run from the root).
        ("README.md", "See `../x` in prose.", False),
        (
            "README.md",
            "```bash\nuv run rlx model generate packages/model/tests/testdata/qwen2\n```",
            False,
        ),
        ("README.md", "```bash\ncat ../x.jsonl\n```", True),
    ],
)
def test_the_scan_draws_the_line_at_the_root(rel: str, text: str, caught: bool) -> None:
    assert bool(findings(rel, text)) == caught, findings(rel, text)
