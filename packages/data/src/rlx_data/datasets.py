"""Datasets of the prompt mixture: JSONL or Parquet files read through rlx_core.storage, each
record made into a prompt (chat turns and text) and a gold answer or tests, optionally
pre-filtered by base-model pass rates.

    ds = load_dataset(cfg.datasets[0], field_path="datasets[0]")
    ds.prompt(17)            # Prompt(id="math/17", messages=(...), text=..., answer=..., ...)
    kept_rows(len(ds), ds.name, load_prefilter(cfg.prefilter.file), cfg.prefilter)  # [0, 2, ...]

A record's prompt is either its `messages_field` (chat turns `{"role", "content"}` ending with a
user turn) or its `prompt_field` put into the config's `template` (one user turn). Its gold
answer is `answer_field`, as is or extracted (`answer_format`: a GSM8K `#### N` or MATH's last
`\\boxed{}`). `load_dataset` checks every record once; a bad record is a ConfigError naming the
config field (`datasets[0].answer_field`), the file and the record: `file:LINE` (1-based) for
JSONL, `file row N` (0-based, as in prompt ids) for Parquet. A code dataset's limits (its
own, each row's, its manifest's) and the manifest's links are checked against the run's
verifier (rlx_data.code_tasks), so a row that loads is a row the verifier judges.

Reading is bounded: a file is read in pieces, a `.jsonl.gz` decompressed as a stream and
refused past MAX_DECOMPRESSED_BYTES, a JSONL line longer than MAX_LINE_BYTES or a JSON value
nested deeper than rlx_core.jsonlimits.MAX_JSON_DEPTH is refused by its line, and a Parquet file
whose footer claims more than MAX_PARQUET_ROWS_PER_BYTE rows per byte of file is refused before
any row is read; its rows are read in batches, their decoded size capped like a JSONL's.

The pre-filter file (written by `rlx prefilter`) has one JSON object per line:
`{"dataset": "math", "row": 17, "pass_rate": 0.375}`. A dataset that appears in it keeps only the
rows listed with min_pass_rate < pass_rate < max_pass_rate; a dataset absent from it is kept whole.
"""

from __future__ import annotations

import gzip
import io
import re
import string
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlx_core.configs.run import DatasetConfig, PrefilterConfig, split_uri
from rlx_core.configs.verifier import JudgeConfig
from rlx_core.errors import ConfigError, InvalidArgument, RlxError
from rlx_core.jsonlimits import loads_bounded
from rlx_core.storage import open_storage
from rlx_data.code_tasks import BadRecord, CodeTask, brief, code_task, manifest_problems
from rlx_data.gold_answers import gold_answer

__all__ = [
    "Dataset",
    "Prompt",
    "kept_rows",
    "load_dataset",
    "load_prefilter",
    "read_jsonl",
    "read_parquet",
]

_ROLES = ("system", "user", "assistant", "tool")  # the roles a chat turn may have
_GZIP_MAGIC = b"\x1f\x8b"

# Bounds on reading a dataset file (module constants: a test may lower them). A real dataset
# stays far inside each; a crafted file reaches one and is refused, naming the file and the cap.
MAX_DECOMPRESSED_BYTES = 4 << 30  # a .jsonl.gz's decompressed size; a Parquet's decoded rows
MAX_LINE_BYTES = 128 << 20  # one JSONL line (one record)
MAX_PARQUET_ROWS_PER_BYTE = 8  # rows a Parquet footer may claim per byte of the file
_PIECE = 16 << 20  # bytes decompressed (or sliced) at a time
_PARQUET_BATCH = 1024  # Parquet rows decoded at a time
_BLANKS = re.compile(rb"\s*")  # a run of blank lines (bytes.strip's whitespace)


@dataclass(frozen=True)
class Prompt:
    """One prompt, ready to tokenize and to score."""

    id: str  # "<dataset>/<row>"
    dataset: str
    row: int
    # the chat turns to render with the checkpoint's chat template, each {"role", "content"}:
    # the record's messages, or `text` as one user turn; system_prompt's turn first when set
    messages: tuple[dict[str, str], ...]
    text: str  # the template applied to the record; for a messages record, its last user turn
    chat: bool  # the dataset's chat_template: render `messages` (true) or encode `text` as is
    reward: str  # "math" or "code"
    answer: str | None  # math: the gold answer
    code: CodeTask | None  # code: how its programs are judged (tests, limits, language)
    math_extractor: str


def _read(uri: str) -> bytes:
    directory, name = split_uri(uri)
    return open_storage(directory).get(name)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def _pieces(uri: str, data: bytes) -> Iterator[bytes]:
    """`data` in pieces of at most _PIECE bytes, decompressed as a stream when it is gzipped;
    InvalidArgument past MAX_DECOMPRESSED_BYTES."""
    if not data.startswith(_GZIP_MAGIC):
        for at in range(0, len(data), _PIECE):
            yield data[at : at + _PIECE]
        return
    total = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while piece := f.read(_PIECE):
                total += len(piece)
                if total > MAX_DECOMPRESSED_BYTES:
                    raise InvalidArgument(
                        f"{uri}: decompresses to more than {_mib(MAX_DECOMPRESSED_BYTES)} (the "
                        "cap on a dataset file's decompressed size): refused"
                    )
                yield piece
    except (OSError, EOFError, zlib.error) as e:
        raise InvalidArgument(f"{uri}: not a gzip file: {e}") from None


def _too_long(uri: str, number: int) -> InvalidArgument:
    return InvalidArgument(
        f"{uri}:{number}: the line is longer than {_mib(MAX_LINE_BYTES)} (the cap on one "
        "JSONL record): refused"
    )


def _after_blanks(block: bytes, at: int) -> int:
    """The position of the first byte at or after `at` that is not whitespace."""
    m = _BLANKS.match(block, at)
    assert m is not None  # `\s*` matches everywhere
    return m.end()


def _block_records(uri: str, block: bytes, number: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) per non-blank line of `block`, whose first line is `number`.
    Blank lines are skipped in runs, never one at a time."""
    if block.isspace():
        return
    at = 0  # `number` is the line holding block[at]
    while (first := _after_blanks(block, at)) < len(block):
        start = block.rfind(b"\n", at, first) + 1 or at
        number += block.count(b"\n", at, start)
        end = block.find(b"\n", first)
        end = len(block) if end < 0 else end
        if end - start > MAX_LINE_BYTES:
            raise _too_long(uri, number)
        line = block[start:end]
        try:
            record = loads_bounded(line)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too deep
            raise InvalidArgument(f"{uri}:{number}: not a JSON object: {e}") from None
        if not isinstance(record, dict):
            got = line[:60].decode("utf-8", errors="replace")
            raise InvalidArgument(f"{uri}:{number}: expected a JSON object, got {got!r}")
        yield number, record
        at = end


def _json_lines(uri: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, JSON object) per non-blank line of a JSONL file (gzipped or not),
    read piece by piece: no more than one line and one piece is held besides the file.

    Lines end at b"\n" only: a JSON string may hold U+2028, which str.splitlines splits at."""
    data = _read(uri)
    number = 1  # the line the next block starts with
    pending: list[bytes] = []  # the start of a line that runs past the pieces read so far
    pending_len = 0
    for piece in _pieces(uri, data):
        last = piece.rfind(b"\n")
        if last < 0:
            pending.append(piece)
            pending_len += len(piece)
            if pending_len > MAX_LINE_BYTES:
                raise _too_long(uri, number)
            continue
        block = b"".join((*pending, piece[: last + 1])) if pending else piece[: last + 1]
        pending, pending_len = [piece[last + 1 :]], len(piece) - last - 1
        yield from _block_records(uri, block, number)
        number += block.count(b"\n")
    if pending_len:
        yield from _block_records(uri, b"".join(pending), number)


def read_jsonl(uri: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (path or URI; gzipped or not); blank lines are skipped
    but counted in error messages' line numbers. Bounded as the module says."""
    return [record for _, record in _json_lines(uri)]


def _parquet_rows(
    uri: str, columns: Collection[str] | None
) -> tuple[Iterator[dict[str, Any]], tuple[str, ...]]:
    """The rows of a Parquet file as dicts holding those of `columns` the file has (None: all),
    decoded a batch at a time, and all the file's column names. A footer claiming more rows
    than the file could hold is refused before any is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = _read(uri)
    try:
        file = pq.ParquetFile(pa.BufferReader(data))
        names = tuple(file.schema_arrow.names)
        claimed = file.metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InvalidArgument(f"{uri}: not a readable Parquet file: {e}") from None
    most = MAX_PARQUET_ROWS_PER_BYTE * len(data)
    if not 0 <= claimed <= most:
        raise InvalidArgument(
            f"{uri}: the footer claims {claimed} rows in {len(data)} bytes (at most "
            f"{MAX_PARQUET_ROWS_PER_BYTE} rows per byte of file): not a readable Parquet file"
        )
    wanted = [n for n in names if columns is None or n in columns]

    def rows() -> Iterator[dict[str, Any]]:
        if not wanted:  # none of the columns asked for: rows without fields, to report on
            yield from ({} for _ in range(claimed))
            return
        decoded = seen = 0
        try:
            for batch in file.iter_batches(batch_size=_PARQUET_BATCH, columns=wanted):
                decoded += batch.nbytes
                seen += batch.num_rows
                if decoded > MAX_DECOMPRESSED_BYTES:
                    raise InvalidArgument(
                        f"{uri}: decodes to more than {_mib(MAX_DECOMPRESSED_BYTES)} (the cap "
                        "on a dataset file's decoded size): refused"
                    )
                if seen > claimed:
                    break
                yield from batch.to_pylist()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise InvalidArgument(f"{uri}: not a readable Parquet file: {e}") from None
        if seen != claimed:
            held = f"more than {claimed}" if seen > claimed else str(seen)
            raise InvalidArgument(
                f"{uri}: holds {held} rows where its footer claims {claimed}: not a readable "
                "Parquet file"
            )

    return rows(), names


def read_parquet(uri: str, columns: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The rows of a Parquet file (path or URI) as dicts of those of `columns` it has (None:
    all); nested columns come as Python lists and dicts (a list of structs: a list of dicts).
    Bounded as the module says."""
    return list(_parquet_rows(uri, columns)[0])


def _show_end(text: str) -> str:
    """The end of a long answer text: where a final answer would be."""
    return repr(text) if len(text) <= 80 else "..." + repr(text[-77:])


def _turns(value: Any, name: str) -> tuple[dict[str, str], ...]:
    """Chat turns {"role", "content"} (other keys dropped), ending with a user turn."""
    if not isinstance(value, (list, tuple)) or not value:
        raise BadRecord(
            "messages_field",
            f"{name!r} must be a non-empty list of {{role, content}} turns, got {brief(value)}",
        )
    turns = []
    for k, turn in enumerate(value):
        role = turn.get("role") if isinstance(turn, Mapping) else None
        content = turn.get("content") if isinstance(turn, Mapping) else None
        if not isinstance(role, str) or not isinstance(content, str):
            raise BadRecord(
                "messages_field",
                f"{name!r} turn {k} is not a {{role, content}} pair of strings: {brief(turn)}",
            )
        if role not in _ROLES:
            raise BadRecord(
                "messages_field",
                f"{name!r} turn {k} has role {role!r}, not one of {', '.join(_ROLES)}",
            )
        turns.append({"role": role, "content": content})
    if turns[-1]["role"] != "user":
        raise BadRecord(
            "messages_field",
            f"{name!r} ends with a {turns[-1]['role']!r} turn: the last turn must be the user's "
            "(the one the model answers)",
        )
    return tuple(turns)


def _answer(cfg: DatasetConfig, value: Any) -> str:
    name = cfg.answer_field
    if cfg.answer_format == "plain":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BadRecord(
                "answer_field", f"{name!r} must be a string or a number, got {brief(value)}"
            )
        return str(value)
    if not isinstance(value, str):
        raise BadRecord("answer_field", f"{name!r} must be a string, got {brief(value)}")
    found = gold_answer(value, cfg.answer_format)
    if found is None:
        what = "final '#### N'" if cfg.answer_format == "gsm8k" else "\\boxed{...}"
        raise BadRecord(
            "answer_field",
            f"{name!r} holds no {what} (answer_format = {cfg.answer_format!r}): {_show_end(value)}",
        )
    return found


def _prompt(
    cfg: DatasetConfig,
    row: int,
    record: Mapping[str, Any],
    problems: Mapping[str, Mapping[str, Any]] | None = None,
    judge: JudgeConfig | None = None,
) -> Prompt:
    """The prompt of `record` (`problems`: a code dataset's manifest; `judge`: the verifier's
    caps); BadRecord when it does not fit the config."""
    messages: tuple[dict[str, str], ...]
    if cfg.messages_field:
        messages = _turns(record[cfg.messages_field], cfg.messages_field)
        text = messages[-1]["content"]
    else:
        value = record[cfg.prompt_field]
        if not isinstance(value, str):
            raise BadRecord(
                "prompt_field", f"{cfg.prompt_field!r} must be a string, got {brief(value)}"
            )
        fields = dict(record)
        fields["prompt"] = value
        try:
            text = cfg.template.format_map(fields)
        except (ValueError, TypeError) as e:  # a format spec that does not fit the value
            raise BadRecord("template", f"cannot apply the template: {e}") from None
        messages = ({"role": "user", "content": text},)
    if cfg.system_prompt and all(t["role"] != "system" for t in messages):
        messages = ({"role": "system", "content": cfg.system_prompt}, *messages)
    answer = _answer(cfg, record[cfg.answer_field]) if cfg.reward == "math" else None
    code = code_task(cfg, record, problems, judge) if cfg.reward == "code" else None
    return Prompt(
        id=f"{cfg.name}/{row}",
        dataset=cfg.name,
        row=row,
        messages=messages,
        text=text,
        chat=cfg.chat_template,
        reward=cfg.reward,
        answer=answer,
        code=code,
        math_extractor=cfg.math_extractor,
    )


class Dataset:
    """A loaded dataset and its config; its records hold the fields the config uses."""

    def __init__(
        self,
        config: DatasetConfig,
        records: Sequence[Mapping[str, Any]],
        problems: Mapping[str, Mapping[str, Any]] | None = None,
        judge: JudgeConfig | None = None,
    ) -> None:
        """`problems`: {problem id: manifest entry} of a code dataset's `tests_manifest`;
        `judge`: the verifier's caps its limits were checked against."""
        self.config = config
        self.records = list(records)
        self.problems = problems
        self.judge = judge

    @property
    def name(self) -> str:
        return self.config.name

    def __len__(self) -> int:
        return len(self.records)

    def prompt(self, row: int) -> Prompt:
        """The prompt of record `row` (0-based among the file's records)."""
        try:
            return _prompt(self.config, row, self.records[row], self.problems, self.judge)
        except BadRecord as e:
            raise ConfigError(f"{self.config.path} row {row}: {e.message}", field=e.field) from None


def _needed(cfg: DatasetConfig) -> dict[str, str]:
    """{record field: the config field that names it}, the prompt's first."""
    if cfg.messages_field:
        needed = {cfg.messages_field: "messages_field"}
    else:
        needed = {cfg.prompt_field: "prompt_field"}
    if cfg.reward == "math":
        needed.setdefault(cfg.answer_field, "answer_field")
    elif cfg.harness_field:
        needed.setdefault(cfg.harness_field, "harness_field")
    elif cfg.tests_manifest:
        needed.setdefault(cfg.problem_field, "problem_field")
    else:
        needed.setdefault(cfg.tests_field, "tests_field")
    if cfg.reward == "code" and cfg.language_field:
        needed.setdefault(cfg.language_field, "language_field")
    for _, name, _, _ in string.Formatter().parse(cfg.template):
        if name and name != "prompt":
            needed.setdefault(name, "template")
    return needed


def _optional(cfg: DatasetConfig) -> tuple[str, ...]:
    """The record fields a dataset reads when a record has them: a code row's own limits."""
    if cfg.reward != "code":
        return ()
    return tuple(n for n in (cfg.time_limit_field, cfg.memory_field) if n)


def _check_limits(cfg: DatasetConfig, field_path: str, judge: JudgeConfig) -> None:
    """A code dataset's own limits (0: the problem's or the verifier's) within the caps."""
    for name in ("time_limit_s", "memory_mb"):
        value = getattr(cfg, name)
        if cfg.reward == "code" and value:
            try:
                judge.request_limit(name, value)
            except ValueError as e:
                raise ConfigError(str(e), field=f"{field_path}.{name}", value=value) from None


def load_dataset(
    cfg: DatasetConfig, *, field_path: str = "datasets", judge: JudgeConfig | None = None
) -> Dataset:
    """Read and check a dataset: every record has the fields the config names (not null), a
    string prompt or well-formed chat turns, and a gold answer (math; extracted as
    `answer_format` says) or tests (code) whose limits and links the verifier accepts (`judge`:
    the run's `verifier.judge`; default the verifier's defaults). Errors are ConfigErrors naming
    `<field_path>.<config field>`, the file and the record. The records keep only the fields
    the config uses (a Parquet file is read for those columns only). Reading is bounded (see
    the module): a file past a bound is a ConfigError naming the file and the bound."""
    judge = judge or JudgeConfig()
    needed = _needed(cfg)
    keep = (*needed, *_optional(cfg))
    _check_limits(cfg, field_path, judge)
    problems = (
        _manifest(cfg, field_path, judge) if cfg.reward == "code" and cfg.tests_manifest else None
    )
    columns: tuple[str, ...] | None = None
    rows: Iterator[tuple[int | None, dict[str, Any]]]
    try:
        if cfg.file_format == "parquet":
            parquet, columns = _parquet_rows(cfg.path, needed)
            rows = ((None, r) for r in parquet)
        else:
            rows = _json_lines(cfg.path)
        records: list[dict[str, Any]] = []
        for number, record in rows:
            i = len(records)
            where = f"{cfg.path}:{number}" if number is not None else f"{cfg.path} row {i}"
            _check_record(cfg, field_path, needed, columns, where, i, record, problems, judge)
            trimmed = {n: record[n] for n in keep if n in record}
            records.append(trimmed if len(trimmed) < len(record) else record)
    except ConfigError:  # a record's: it names its own field
        raise
    except InvalidArgument as e:  # the file's (reading it, or a bound)
        raise ConfigError(str(e), field=f"{field_path}.path", value=cfg.path) from None
    if not records:
        raise ConfigError(f"{cfg.path} holds no records", field=f"{field_path}.path")
    return Dataset(cfg, records, problems, judge)


def _check_record(
    cfg: DatasetConfig,
    field_path: str,
    needed: Mapping[str, str],
    columns: tuple[str, ...] | None,
    where: str,
    i: int,
    record: Mapping[str, Any],
    problems: Mapping[str, Mapping[str, Any]] | None,
    judge: JudgeConfig,
) -> None:
    """ConfigError naming `where` unless `record` (row `i`) makes a prompt."""
    absent = [n for n in needed if n not in record]
    if absent:
        has = columns if columns is not None else tuple(sorted(record))
        raise ConfigError(
            f"{where}: the record has no field {', '.join(map(repr, absent))} "
            f"(it has {', '.join(map(repr, has)) or 'none'})",
            field=f"{field_path}.{needed[absent[0]]}",
            value=absent[0],
        )
    null = [n for n in needed if record[n] is None]
    if null:
        raise ConfigError(
            f"{where}: field {null[0]!r} is null",
            field=f"{field_path}.{needed[null[0]]}",
            value=null[0],
        )
    try:
        _prompt(cfg, i, record, problems, judge)
    except BadRecord as e:
        raise ConfigError(f"{where}: {e.message}", field=f"{field_path}.{e.field}") from None


def _manifest(
    cfg: DatasetConfig, field_path: str, judge: JudgeConfig
) -> dict[str, Mapping[str, Any]]:
    """The problems of a code dataset's `tests_manifest`, read once at start (its nesting
    bounded, its links and limits checked)."""
    field = f"{field_path}.tests_manifest"
    try:
        manifest = loads_bounded(_read(cfg.tests_manifest))
    except RlxError as e:  # not found, unreadable
        raise ConfigError(str(e), field=field, value=cfg.tests_manifest) from None
    except ValueError as e:
        raise ConfigError(f"{cfg.tests_manifest}: not JSON: {e}", field=field) from None
    try:
        return manifest_problems(manifest, cfg.tests_manifest, judge)
    except ValueError as e:
        raise ConfigError(str(e), field=field, value=cfg.tests_manifest) from None


def load_prefilter(uri: str) -> dict[str, dict[int, float]]:
    """{dataset: {row: pass_rate}} from a pre-filter JSONL file ("" -> {})."""
    if not uri:
        return {}
    table: dict[str, dict[int, float]] = {}
    for number, record in enumerate(read_jsonl(uri), 1):
        try:
            dataset, row, rate = str(record["dataset"]), int(record["row"]), record["pass_rate"]
            rate = float(rate)
        # OverflowError: a row of 1e400 (inf to int), a pass_rate of 400 digits (to float)
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ConfigError(
                f"{uri}: record {number} needs dataset, row and pass_rate: {record!r}",
                field="prefilter.file",
            ) from None
        if not 0 <= rate <= 1:
            raise ConfigError(
                f"{uri}: record {number}: pass_rate {rate} is outside 0-1", field="prefilter.file"
            )
        table.setdefault(dataset, {})[row] = rate
    return table


def kept_rows(
    size: int, name: str, prefilter: Mapping[str, Mapping[int, float]], cfg: PrefilterConfig
) -> list[int]:
    """The rows of a dataset of `size` records that the pre-filter keeps."""
    rates = prefilter.get(name)
    if rates is None:
        return list(range(size))
    return [
        r for r in range(size) if r in rates and cfg.min_pass_rate < rates[r] < cfg.max_pass_rate
    ]
