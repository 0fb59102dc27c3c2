"""A hostile chat template is bounded: it neither spins nor allocates without end, renders the
same on every call, and fails with one InvalidArgument naming the checkpoint it came from; a
tokenizer.json whose regex makes the Rust `tokenizers` crate panic is an InvalidArgument too."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from rlx_core.chat_template import MAX_CHARS, MAX_RANGE, BoundedTemplate
from rlx_core.errors import InvalidArgument
from rlx_core.tokenizer import load_tokenizer

QWEN2 = Path(__file__).resolve().parents[2] / "model" / "tests" / "testdata" / "qwen2"
CHAT = [{"role": "user", "content": "2+2?"}]

# each template, and the words of the error it must end in
HOSTILE = {
    "nested range loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "range(100000) has 100000 numbers",
    ),
    "nested loops within the range cap": (
        "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}"
        "{% endfor %}{% endfor %}{% endfor %}",
        "ran past",
    ),
    "loops over a string": (
        "{% set s = 'ab' * 3000 %}{% for i in s %}{% for j in s %}{% for k in s %}"
        "{% endfor %}{% endfor %}{% endfor %}",
        "ran past",
    ),
    "string doubling through a namespace": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s|length }}",
        "the operator '~' would make a value of",
    ),
    "list doubling with +": (
        "{% set ns = namespace(l=['ab']) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
        "{% endfor %}",
        "the operator '+' makes a value of more than",
    ),
    "doubling through a set block": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set x %}{{ ns.s }}{{ ns.s }}"
        "{% endset %}{% set ns.s = x %}{% endfor %}",
        "a block would make a value of",
    ),
    "a huge range": ("{% for i in range(10 ** 9) %}x{% endfor %}", "1000000000 numbers"),
    "a range as output": ("{{ range(100000)|list }}", "has 100000 numbers"),
    "string times a huge number": ("{{ 'a' * 10 ** 10 }}", "10000000000 characters"),
    "a huge power": ("{{ 7 ** (10 ** 7) }}", "bits"),
    "a huge width": ("{{ 'a'|center(10 ** 9) }}", "width 1000000000"),
    "a huge str.ljust": ("{{ 'a'.ljust(10 ** 9) }}", "width 1000000000"),
    "a huge format width": ("{{ '{:>1000000000}'.format(1) }}", "width 1000000000"),
    "a huge percent width": ("{{ '%1000000000d' % 1 }}", "width 1000000000"),
    "a huge join": ("{{ (['a' * 4000000] * 2)|join }}", "characters"),
    "a huge replace": ("{{ ('a' * 100000).replace('a', 'b' * 100000) }}", "characters"),
    "a huge |replace": (
        "{{ ('a' * 100000)|replace('a', 'b' * 100000) }}",
        "|replace would make a value of 10000100000 characters",
    ),
    "endless recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "Recursion"),
    "random": ("{{ messages|random }}", "|random, which renders differently on every call"),
    "lipsum": ("{{ lipsum(1) }}", "lipsum, which renders differently on every call"),
}


def _checkpoint(tmp_path: Path, template: str) -> Path:
    out = tmp_path / "ckpt"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(QWEN2 / name, out / name)
    (out / "chat_template.jinja").write_text(template)
    return out


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_one_error_naming_its_checkpoint(name: str, tmp_path: Path) -> None:
    template, words = HOSTILE[name]
    ckpt = _checkpoint(tmp_path, template)
    tok = load_tokenizer(str(ckpt))
    with pytest.raises(InvalidArgument) as e:
        tok.prompt_ids(CHAT)
    message = str(e.value)
    assert message.startswith(f"{ckpt}: chat template "), message
    assert words in message, message
    assert "\n" not in message


def test_a_timed_out_render_leaves_nothing_pending() -> None:
    """After a template ran past its time, the same thread goes on (the watchdog's raise does
    not land later), and another template renders normally."""
    slow = BoundedTemplate(
        "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
        source="slow",
        timeout_s=0.2,
    )
    with pytest.raises(InvalidArgument, match=r"^slow: chat template stopped: it ran past 0.2 s"):
        slow.render()
    total = sum(i for i in range(3_000_000))  # a second of plain work on the same thread
    assert total == 3_000_000 * 2_999_999 // 2
    fine = BoundedTemplate("{{ a ~ b }}", source="fine")
    assert fine.render(a="x", b="y") == "xy"


def test_bounds_leave_real_templates_alone(tmp_path: Path) -> None:
    """A template within every bound renders as before: the checkpoint's own, and one using
    ranges, string methods, format and tojson at the edge of the caps."""
    tok = load_tokenizer(str(QWEN2))
    rendered = tok.render(CHAT)
    assert rendered == tok.render(CHAT)  # the same on every call
    assert rendered.endswith("<|im_start|>assistant\n")
    template = (
        "{% for i in range(" + str(MAX_RANGE) + ") %}{% endfor %}"
        "{{ ('%5d|' % 42) ~ '{:>6}'.format('ab') ~ 'x'|center(5) }}"
        "{{ messages|tojson }}{{ ('ab' * 10)|replace('a', 'c') }}"
    )
    ckpt = _checkpoint(tmp_path, template)
    out = load_tokenizer(str(ckpt)).render(CHAT)
    assert out == ('   42|    ab  x  [{"role": "user", "content": "2+2?"}]' + "cb" * 10)
    big = BoundedTemplate("{{ s ~ s }}", source="big").render(s="a" * (MAX_CHARS // 2))
    assert len(big) == MAX_CHARS


def test_a_tokenizer_regex_that_panics_in_rust_is_an_invalid_argument(tmp_path: Path) -> None:
    """`(a+)+b` on a long run of a's exhausts oniguruma's retry limit; the tokenizers crate
    panics (pyo3_runtime.PanicException, a BaseException), which rlx names as an error."""
    body = json.loads((QWEN2 / "tokenizer.json").read_text())
    body["pre_tokenizer"] = {
        "type": "Split",
        "pattern": {"Regex": "(a+)+b"},
        "behavior": "Isolated",
        "invert": False,
    }
    ckpt = _checkpoint(tmp_path, "{{ messages[0]['content'] }}")
    (ckpt / "tokenizer.json").write_text(json.dumps(body))
    tok = load_tokenizer(str(ckpt))
    assert tok.encode("ab") == tok.encode("ab")  # a short input is fine
    with pytest.raises(InvalidArgument) as e:
        tok.prompt_ids("a" * 60 + "c")
    message = str(e.value)
    assert message.startswith(f"{ckpt}/tokenizer.json fails to encode 'aaaa"), message
    assert "PanicException" in message and "retry-limit-in-match" in message


def test_the_watchdog_stops_only_the_thread_that_ran_past() -> None:
    """Renderings on several threads at once: the slow one is stopped, the others finish."""
    slow = BoundedTemplate(
        "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
        source="slow",
        timeout_s=0.5,
    )
    fast = BoundedTemplate("{% for i in range(2000) %}{{ i % 7 }}{% endfor %}", source="fast")
    want = "".join(str(i % 7) for i in range(2000))
    results: dict[str, object] = {}

    def render(name: str, template: BoundedTemplate) -> None:
        try:
            results[name] = [template.render() for _ in range(20 if name != "slow" else 1)]
        except InvalidArgument as e:
            results[name] = e

    threads = [threading.Thread(target=render, args=("slow", slow))] + [
        threading.Thread(target=render, args=(f"fast{i}", fast)) for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results["slow"], InvalidArgument)
    assert "ran past 0.5 s" in str(results["slow"])
    for i in range(3):
        assert results[f"fast{i}"] == [want] * 20
