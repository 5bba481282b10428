"""The fuzz corpus: one seeded mutation engine over the files sparkonce reads, and the reads that must survive it.

Formats: a Kafka query's checkpoint (``metadata``, ``offsets/N``, ``commits/N``, ``sources/0/0``), a Delta source's
checkpoint offsets, a file sink's ``_spark_metadata``, and Delta logs (JSON commits, classic and multi-part Parquet
checkpoints, ``_last_checkpoint``) of a sparkonce sink table and two of Delta's golden tables. Mutations: bytes
(truncation, bit flips, a random byte, a deleted range, inserted bytes, an empty or deleted file), JSON structure
(a wrong type, a missing key, a huge number, a negative number, unicode, NaN/Infinity, the ``vN`` line) and Parquet
(a wrong schema, a damaged footer, a wrong value in a row).

Every read of a damaged file must end in a correct answer or an error of sparkonce's error tree naming a file of
the damaged checkpoint or table; anything else is a ``traceback`` (an exception outside the tree, or an error that
names no file) or a ``wrong-answer`` (a damaged file that still parses read as something other than what it says,
or a damaged file that vanishes from the result without a problem naming it).

``tests/unit/test_fuzz_files.py`` runs a seeded sample; ``benchmarks/fuzz_corpus.py`` runs the corpus (thousands of
cases, plus Kafka record values through the bronze stage's parse with Spark). Runs in the test process (no Spark).
"""

from __future__ import annotations

import json
import math
import random
import shutil
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from sparkonce.checkpoint import read_checkpoint, write_offsets
from sparkonce.checkpoint.file_log import read_file_log
from sparkonce.checkpoint.files import OffsetSeqMetadata
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.errors import SparkonceError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.ops.doctor import diagnose
from sparkonce.ops.history import table_history
from sparkonce.ops.verify import verify_table
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QID = "11111111-2222-3333-4444-555555555555"
Outcome = Literal["ok", "clear-error", "traceback", "wrong-answer"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "clear-error", "traceback", "wrong-answer")
BYTE_MUTATIONS = ("truncate", "flip-bit", "random-byte", "delete-range", "insert-bytes", "empty", "delete-file")
JSON_MUTATIONS = (
    "json-wrong-type",
    "json-drop-key",
    "json-huge-number",
    "json-negative",
    "json-unicode",
    "json-nan",
    "json-version-line",
)
PARQUET_MUTATIONS = ("parquet-wrong-schema", "parquet-footer", "parquet-value")
JSON_FORMATS = frozenset(
    {"metadata", "offsets", "commits", "sources", "delta-offsets", "spark-metadata", "delta-json", "last-checkpoint"}
)
_NOISE = (b"\x00", b"\xff\xfe", b"{", b"}", b'"', b"\n", b"v99\n", b"-1", b"9" * 30, b"\xc3(", b"NaN", b"[]")
_UNICODE = ("é", "☃", "\u0000", "\ud800", "\U0001d518", "../../x", "%2F%00", "", " ", "\n", "a" * 300)
_HUGE = (2**63, 2**64, -(2**63) - 1, 10**30, 10**400, 1e308, -1e308, 2**53 + 1)


@dataclass(frozen=True)
class Target:
    """A file to damage, the checkpoint or table it belongs to, and its format."""

    path: Path
    root: Path
    fmt: str


@dataclass
class World:
    """The undamaged inputs: checkpoints, tables, and the Delta source schemas (read before any damage)."""

    cp: Path
    delta_cp: Path
    sink: Path
    golden: Path
    multi: Path
    file_sink: Path
    schemas: dict[Path, Any] = field(default_factory=dict)

    @property
    def tables(self) -> tuple[Path, ...]:
        return (self.sink, self.golden, self.multi)


def build_world(root: Path, fixtures_dir: Path) -> World:
    """A Kafka query's checkpoint (with ``sources/0/0``), its Delta sink with a Parquet checkpoint, a Delta source
    query's checkpoint reading that sink, two of Delta's golden tables (classic and multi-part checkpoints) and a
    file sink's ``_spark_metadata``."""
    cp = make_checkpoint(root / "cp", query_id=QID, planned=range(4), committed=range(3))
    (cp / "sources" / "0").mkdir(parents=True)
    shutil.copy(
        fixtures_dir / "spark-checkpoints" / "kafka-0-10-sql" / "kafka-source-initial-offset-version-2.1.0.bin",
        cp / "sources" / "0" / "0",
    )
    sink = root / "sink"
    for b in range(3):
        stream_commit(sink, QID, b, raw_rows("events", 0, range(b * 10, (b + 1) * 10)))
    from deltalake import DeltaTable

    DeltaTable(str(sink)).create_checkpoint()
    stream_commit(sink, QID, 3, raw_rows("events", 0, range(30, 40)))
    shutil.copytree(fixtures_dir / "delta-tables" / "checkpoint", root / "golden-checkpoint")
    shutil.copytree(fixtures_dir / "delta-tables" / "multi-part-checkpoint", root / "golden-multipart")
    file_sink = root / "file-sink"
    shutil.copytree(fixtures_dir / "spark-checkpoints" / "file-sink-log-version-2.1.0", file_sink / "_spark_metadata")
    world = World(cp, root / "delta-cp", sink, root / "golden-checkpoint", root / "golden-multipart", file_sink)
    table_id = DeltaLog(sink).snapshot().metadata["id"]
    ends = [(1, -1, True), (2, 0, False), (4, -1, False)]
    for batch_id, (version, index, starting) in enumerate(ends):
        offset = {
            "sourceVersion": 1,
            "reservoirId": table_id,
            "reservoirVersion": version,
            "index": index,
            "isStartingVersion": starting,
        }
        write_offsets(
            world.delta_cp,
            batch_id,
            metadata=OffsetSeqMetadata(0, 1_700_000_000_000 + batch_id, {}),
            sources=[json.dumps(offset)],
        )
    from sparkonce.delta.source import DeltaDataSource

    for table in world.tables:
        world.schemas[table] = DeltaDataSource({"path": str(table)}).schema()
    return world


def targets(world: World) -> list[Target]:
    """Every file of the world that a mutation may hit, with its format."""
    out: list[Target] = []
    for p in sorted(world.cp.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            fmt = "metadata" if p.name == "metadata" else p.relative_to(world.cp).parts[0]
            out.append(Target(p, world.cp, fmt))
    out += [Target(p, world.delta_cp, "delta-offsets") for p in sorted((world.delta_cp / "offsets").iterdir())]
    log = world.file_sink / "_spark_metadata"
    out += [Target(p, world.file_sink, "spark-metadata") for p in sorted(log.iterdir()) if not p.name.startswith(".")]
    for table in world.tables:
        for p in sorted((table / "_delta_log").iterdir()):
            if not p.is_file() or ".crc" in p.name:
                continue
            fmt = (
                "last-checkpoint"
                if p.name == "_last_checkpoint"
                else "delta-checkpoint"
                if p.name.endswith(".parquet")
                else "delta-json"
            )
            out.append(Target(p, table, fmt))
    return out


def mutations_for(fmt: str) -> tuple[str, ...]:
    if fmt == "delta-checkpoint":
        return BYTE_MUTATIONS + PARQUET_MUTATIONS
    return BYTE_MUTATIONS + JSON_MUTATIONS


# --------------------------------------------------------------------------------------------- the mutations
def mutate(data: bytes, how: str, rng: random.Random) -> bytes | None:
    """The damaged bytes (``None``: delete the file). A structural mutation that finds nothing to change falls back
    to inserting bytes."""
    if how.startswith("json-"):
        out = _mutate_json_file(data, how, rng)
    elif how.startswith("parquet-"):
        out = _mutate_parquet(data, how, rng)
    else:
        return _mutate_bytes(data, how, rng)
    return out if out is not None and out != data else _mutate_bytes(data, "insert-bytes", rng)


def _mutate_bytes(data: bytes, how: str, rng: random.Random) -> bytes | None:
    n = len(data)
    if how == "delete-file":
        return None
    if how == "empty" or n == 0:
        return b""
    if how == "truncate":
        return data[: rng.randrange(n)]
    if how == "flip-bit":
        i = rng.randrange(n)
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if how == "random-byte":
        i = rng.randrange(n)
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    if how == "delete-range":
        i = rng.randrange(n)
        return data[:i] + data[i + rng.randrange(1, min(64, n - i) + 1) :]
    i = rng.randrange(n + 1)
    return data[:i] + rng.choice(_NOISE) + data[i:]


def _mutate_json_file(data: bytes, how: str, rng: random.Random) -> bytes | None:
    lines = data.split(b"\n")
    if how == "json-version-line":
        versioned = [i for i, line in enumerate(lines) if line.lstrip(b"\x00\x01").startswith(b"v")]
        if not versioned:
            return None
        i = rng.choice(versioned)
        lead = lines[i][: len(lines[i]) - len(lines[i].lstrip(b"\x00\x01"))]
        version = rng.choice([b"v0", b"v-1", b"v3", b"v99999999999999999999", b"v1.0", b"V1", b"v", b"v\xd9\xa1"])
        lines[i] = lead + version
        return b"\n".join(lines)
    parsed: list[tuple[int, bytes, Any]] = []
    for i, line in enumerate(lines):
        start = min((j for j in (line.find(b"{"), line.find(b"[")) if j >= 0), default=-1)
        if start < 0:
            continue
        try:
            parsed.append((i, line[:start], json.loads(line[start:])))
        except (ValueError, UnicodeDecodeError):
            continue
    if not parsed:
        return None
    i, prefix, doc = rng.choice(parsed)
    changed = mutate_value(doc, how, rng)
    if changed is None:
        return None
    lines[i] = prefix + _dumps(changed)
    return b"\n".join(lines)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=True, ensure_ascii=True).encode()


def _nodes(value: Any, path: tuple[Any, ...] = (), depth: int = 0) -> Iterable[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, (*path, k), depth + 1)
    elif isinstance(value, list):
        for k, v in enumerate(value[:20]):
            yield from _nodes(v, (*path, k), depth + 1)


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def mutate_value(doc: Any, how: str, rng: random.Random) -> Any | None:
    """A structurally mutated copy of a JSON document (``None``: nothing to mutate)."""
    doc = json.loads(json.dumps(doc))
    nodes = list(_nodes(doc))
    leaves = [(p, v) for p, v in nodes if p and not isinstance(v, (dict, list))]
    numbers = [(p, v) for p, v in leaves if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if how == "json-drop-key":
        keyed = [(p, v) for p, v in nodes if isinstance(v, dict) and v]
        if not keyed:
            return None
        p, obj = rng.choice(keyed)
        del obj[rng.choice(list(obj))]
        return doc
    if how == "json-unicode":
        strings = [(p, v) for p, v in leaves if isinstance(v, str)]
        keyed = [(p, v) for p, v in nodes if isinstance(v, dict) and v]
        if keyed and (not strings or rng.random() < 0.3):
            p, obj = rng.choice(keyed)
            key = rng.choice(list(obj))
            obj[key + rng.choice(_UNICODE)] = obj.pop(key)
            return doc
        if not strings:
            return None
        p, v = rng.choice(strings)
        u = rng.choice(_UNICODE)
        return _set(doc, p, rng.choice([u, v + u, u + v]))
    pool = numbers if how in ("json-huge-number", "json-negative", "json-nan") and numbers else leaves
    if how == "json-wrong-type":
        pool = [(p, v) for p, v in nodes if p]
    if not pool:
        return None
    p, v = rng.choice(pool)
    if how == "json-wrong-type":
        choices: list[Any] = ["x", "12", [], {}, True, None, 1.5, 7, [1]]
        new = rng.choice([c for c in choices if type(c) is not type(v)])
    elif how == "json-huge-number":
        new = rng.choice(_HUGE)
    elif how == "json-negative":
        new = rng.choice([-1, -2, -rng.randrange(1, 10**6), -0.5])
    else:
        new = rng.choice([math.nan, math.inf, -math.inf])
    return _set(doc, p, new)


def _mutate_parquet(data: bytes, how: str, rng: random.Random) -> bytes | None:
    if how == "parquet-footer":
        n = len(data)
        if n < 12:
            return None
        footer = int.from_bytes(data[-8:-4], "little")
        choice = rng.randrange(4)
        if choice == 0:  # the magic
            return data[:-4] + rng.choice([b"PAR0", b"\x00\x00\x00\x00", b"PAR"])
        if choice == 1:  # the footer length
            wrong = rng.choice([0, 1, footer + 1, footer - 1, n, 2**31 - 1])
            return data[:-8] + (wrong % 2**32).to_bytes(4, "little") + data[-4:]
        start = max(4, n - 8 - footer)
        i = rng.randrange(start, n - 8)
        if choice == 2:  # a byte of the footer's metadata
            return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
        return data[:start] + data[i:]  # the footer cut short
    import io

    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError):
        return None
    if how == "parquet-wrong-schema":
        table = _wrong_schema(table, rng)
    else:
        rows = table.to_pylist()
        filled = [(r, k) for r in rows for k, v in r.items() if v is not None]
        if not filled:
            return None
        row, key = rng.choice(filled)
        op = rng.choice(JSON_MUTATIONS[:-1])
        changed = mutate_value(row[key], op, rng) if isinstance(row[key], dict) else None
        if changed is None:
            return None
        row[key] = changed
        try:
            table = pa.Table.from_pylist(rows, schema=table.schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            try:
                table = pa.Table.from_pylist(rows)  # the value does not fit the column: a schema of its own
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return None
    sink = io.BytesIO()
    try:
        pq.write_table(table, sink)
    except (pa.ArrowException, OSError):
        return None
    return sink.getvalue()


def _wrong_schema(table: pa.Table, rng: random.Random) -> pa.Table:
    name = rng.choice(table.column_names)
    column = table.column(name).combine_chunks()
    choice = rng.randrange(4)
    if choice == 0:
        return table.drop_columns([name])
    if choice == 1:
        return table.rename_columns([f"{n}_" if n == name else n for n in table.column_names])
    if choice == 2 or not pa.types.is_struct(column.type) or column.type.num_fields < 2:
        as_text = pa.array([None if v is None else json.dumps(v, default=str) for v in column.to_pylist()])
        return table.set_column(table.column_names.index(name), name, as_text)
    fields = [column.type.field(i) for i in range(column.type.num_fields)]
    drop = rng.randrange(len(fields))
    arrays = [column.field(i) for i in range(len(fields)) if i != drop]
    if rng.random() < 0.5:  # one field a string instead of dropped
        arrays.insert(drop, pa.array([None if v is None else str(v) for v in column.field(drop).to_pylist()]))
        names = [f.name for f in fields]
    else:
        names = [f.name for i, f in enumerate(fields) if i != drop]
    struct = pa.StructArray.from_arrays(arrays, names=names, mask=column.is_null())
    return table.set_column(table.column_names.index(name), name, struct)


# --------------------------------------------------------------------------------------------- the reads
def _no_broker(partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    return {tp: (0, 10**9) for tp in partitions}


class WrongAnswer(AssertionError):
    """A damaged file that still parses was read as something other than what it says."""


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


REPORTED = "reported"
"""What a read returns when the reader reported the damaged file as a problem naming it (a clear error)."""


def _check_checkpoint(target: Target, damaged: bytes | None, world: World) -> str | None:
    """Every checkpoint file is either read as it says or named by a problem."""
    state = read_checkpoint(target.root)
    if damaged is None:
        return None
    named = {Path(p.path) for p in state.problems}
    path = target.path
    if path in named:
        return REPORTED
    if target.fmt == "metadata":
        if state.metadata is None:
            raise WrongAnswer(f"{path}: neither read nor named by a problem")
        doc = _json_or_none(damaged.decode("utf-8").strip())
        if not isinstance(doc, dict) or doc.get("id") != state.metadata.query_id:
            raise WrongAnswer(f"{path}: query id {state.metadata.query_id!r} is not the file's {doc!r}")
        return
    if target.fmt in ("offsets", "commits"):
        batch_id = int(path.name) if path.name.isdigit() else None
        if batch_id is None:
            return None
        parsed = (state.offsets if target.fmt == "offsets" else state.commits).get(batch_id)
        if parsed is None:
            raise WrongAnswer(f"{path}: neither read nor named by a problem")
        text = damaged.decode("utf-8")
        if parsed.raw != text:
            raise WrongAnswer(f"{path}: read text differs from the file")
        lines = text.split("\n")
        if target.fmt == "offsets" and len(lines) > 2 and parsed.log_version == 1 and lines[2] != "-":
            said = _json_or_none(lines[2])
            if said is not None and parsed.source_offset("0") != said and not _has_nan(said):
                raise WrongAnswer(f"{path}: source 0 offset {parsed.source_offset('0')!r} is not the file's {said!r}")
        if target.fmt == "offsets" and len(lines) > 1 and parsed.metadata is not None:
            said = _json_or_none(lines[1])
            stamp = said.get("batchTimestampMs") if isinstance(said, dict) else None
            if type(stamp) is int and parsed.metadata.batch_timestamp_ms != stamp:
                raise WrongAnswer(f"{path}: batchTimestampMs {parsed.metadata.batch_timestamp_ms} is not the file's")
        return None
    if target.fmt == "sources":
        source = state.sources.get(path.parent.name, {}).get(int(path.name)) if path.name.isdigit() else None
        if source is None and path.name.isdigit():
            raise WrongAnswer(f"{path}: neither read nor named by a problem")
    return None


def _check_file_log(target: Target, damaged: bytes | None, world: World) -> str | None:
    """Every ``_spark_metadata`` file is either read or named by a problem."""
    log = read_file_log(world.file_sink / "_spark_metadata")
    if damaged is None:
        return None
    if any(p.path == target.path for p in log.problems):
        return REPORTED
    if not any(b.path == target.path for b in log.batches) and target.path.name.split(".")[0].isdigit():
        stray = any(b.batch_id == int(target.path.name.split(".")[0]) for b in log.batches)
        if not stray:  # a stray "N" beside "N.compact" is ignored by design
            raise WrongAnswer(f"{target.path}: neither read nor named by a problem")
    return None


def _has_nan(value: Any) -> bool:
    return any(isinstance(v, float) and math.isnan(v) for _, v in _nodes(value))


def _check_delta_source(world: World) -> None:
    """The Delta source plans every recorded batch of the Delta source checkpoint: each offset it accepts is read as
    the file says, and planning from it either works or fails with a clear error."""
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from sparkonce.delta.read.stream import DeltaSourceOffset, DeltaStreamReader
    from sparkonce.delta.table.options import StreamReadOptions

    state = read_checkpoint(world.delta_cp)
    problems = [p for p in state.problems if Path(p.path).parent.name == "offsets"]
    if problems:
        raise _as_checkpoint_error(problems[0].problem)
    reader = DeltaStreamReader(StreamReadOptions.parse({"path": str(world.sink)}), world.schemas[world.sink])
    start: dict[str, Any] = reader.initialOffset()
    for batch_id in sorted(state.offsets):
        offsets = state.offsets[batch_id]
        end = offsets.source_offset("0")
        if not isinstance(end, dict):
            offset = DeltaSourceOffset.from_json(end)  # must raise
            raise WrongAnswer(f"{offsets.path}: a Delta source offset {end!r} accepted as {offset}")
        parsed = DeltaSourceOffset.from_json(end)
        expected = (end["reservoirId"], end["reservoirVersion"], end["index"], end["isStartingVersion"])
        got = (parsed.reservoir_id, parsed.reservoir_version, parsed.index, parsed.is_starting_version)
        if got != expected:
            raise WrongAnswer(f"{offsets.path}: Delta source offset {end!r} read as {got}")
        reader.partitions(start, end)
        start = end
    reader.latestOffset(start, ReadMaxFiles(1000))


def _as_checkpoint_error(message: str) -> SparkonceError:
    from sparkonce.errors import CheckpointError

    return CheckpointError(message)


def _check_delta_source_on(table: Path, world: World) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from sparkonce.delta.read.stream import DeltaStreamReader
    from sparkonce.delta.table.options import StreamReadOptions

    reader = DeltaStreamReader(StreamReadOptions.parse({"path": str(table)}), world.schemas[table])
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxFiles(1000))
    if end != start:
        reader.partitions(start, end)


def _cli_doctor(args: list[str]) -> None:
    from click.testing import CliRunner

    from sparkonce.cli.main import cli

    result = CliRunner().invoke(cli, ["doctor", *args, "--json"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if "Traceback" in result.output:
        raise WrongAnswer(f"sparkonce doctor printed a traceback: {result.output[-400:]}")


def reads(target: Target, damaged: bytes | None, world: World) -> list[tuple[str, Callable[[], Any]]]:
    """Everything that reads the damaged file, by name."""
    cp = world.cp
    if target.fmt in ("metadata", "offsets", "commits", "sources"):
        return [
            ("read_checkpoint", lambda: _check_checkpoint(target, damaged, world)),
            ("doctor", lambda: diagnose(cp, watermarks=_no_broker, checkpoint_scan="full")),
            ("cli-doctor", lambda: _cli_doctor([str(cp)])),
        ]
    if target.fmt == "delta-offsets":
        return [
            (
                "read_checkpoint",
                lambda: _check_checkpoint(Target(target.path, world.delta_cp, "offsets"), damaged, world),
            ),
            ("delta-source", lambda: _check_delta_source(world)),
            ("doctor", lambda: diagnose(world.delta_cp, checkpoint_scan="full")),
        ]
    if target.fmt == "spark-metadata":
        return [
            ("read_file_log", lambda: _check_file_log(target, damaged, world)),
            ("doctor", lambda: diagnose(cp, tables=[world.file_sink])),
        ]
    table = target.root
    out: list[tuple[str, Callable[[], Any]]] = [
        ("delta-log", lambda: DeltaLog(table).snapshot()),
        ("history", lambda: table_history(table, limit=3)),
        ("doctor", lambda: diagnose(cp, tables=[table], history_scan="full")),
        ("delta-source", lambda: _check_delta_source_on(table, world)),
    ]
    if table == world.sink:
        out.append(("verify", lambda: verify_table(table)))
        out.append(("cli-doctor", lambda: _cli_doctor([str(cp), "--table", str(table)])))
    return out


# --------------------------------------------------------------------------------------------- the run
@dataclass
class CorpusResult:
    """Counts per format and outcome, and the first lines of every bad case."""

    counts: Counter[tuple[str, Outcome]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)

    @property
    def tracebacks(self) -> int:
        return sum(v for (_, o), v in self.counts.items() if o in ("traceback", "wrong-answer"))


def _names_its_file(err: SparkonceError, target: Target, read: str, world: World) -> bool:
    """The error names a file of the damaged checkpoint or table. The Delta source gets its offsets from Spark, not
    from a file: its errors name the offset (``SourceOffsetError`` quotes it) or the table it reads."""
    from sparkonce.errors import SourceOffsetError

    if str(target.root) in str(err):
        return True
    return read == "delta-source" and (isinstance(err, SourceOffsetError) or str(world.sink) in str(err))


def run_case(target: Target, how: str, rng: random.Random, world: World, result: CorpusResult, case: int) -> Outcome:
    """Damage one file, run every read of it, restore it; the case's outcome is its worst read's."""
    original = target.path.read_bytes()
    damaged = mutate(original, how, rng)
    worst: Outcome = "ok"
    try:
        if damaged is None:
            target.path.unlink()
        else:
            target.path.write_bytes(damaged)
        for name, read in reads(target, damaged, world):
            outcome: Outcome
            try:
                outcome = "clear-error" if read() == REPORTED else "ok"
            except WrongAnswer as err:
                outcome = "wrong-answer"
                result.bad.append(f"case {case} {how} {target.path} [{name}]: wrong answer: {err}")
            except SparkonceError as err:
                outcome = "clear-error"
                result.errors[type(err).__name__] += 1
                if not _names_its_file(err, target, name, world):
                    outcome = "traceback"
                    result.bad.append(f"case {case} {how} {target.path} [{name}]: error names no file of it: {err}")
            except Exception as err:  # the point of the corpus: anything else is a traceback for the user
                outcome = "traceback"
                frame = traceback.extract_tb(err.__traceback__)[-1]
                where = f"{Path(frame.filename).name}:{frame.lineno}"
                result.bad.append(
                    f"case {case} {how} {target.path} [{name}]: {type(err).__name__}: {str(err)[:300]} at {where}"
                )
            if OUTCOMES.index(outcome) > OUTCOMES.index(worst):
                worst = outcome
    finally:
        target.path.write_bytes(original)
    result.counts[(target.fmt, worst)] += 1
    return worst


def run_corpus(world: World, *, seed: int, cases: int) -> CorpusResult:
    """Run ``cases`` seeded cases over the world's files (each format drawn about equally often)."""
    rng = random.Random(seed)
    by_format: dict[str, list[Target]] = {}
    for t in targets(world):
        by_format.setdefault(t.fmt, []).append(t)
    formats = sorted(by_format)
    result = CorpusResult()
    for case in range(cases):
        target = rng.choice(by_format[rng.choice(formats)])
        how = rng.choice(mutations_for(target.fmt))
        run_case(target, how, rng, world, result, case)
    return result


# --------------------------------------------------------------------------------------------- Kafka records
GOOD_RECORD = {"device_id": "sensor-3", "reading_time": "2026-11-26T01:00:00Z", "value": 21.5}


def mutated_records(seed: int, count: int) -> list[tuple[str, bytes | None]]:
    """``count`` record values: the good reading mutated by one byte or JSON mutation each."""
    rng = random.Random(seed)
    good = json.dumps(GOOD_RECORD).encode()
    hows = [h for h in (*BYTE_MUTATIONS, *JSON_MUTATIONS) if h != "json-version-line"]
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        how = rng.choice(hows)
        out.append((how, mutate(good, how, rng)))
    return out


def _bronze_says(value: bytes | None) -> dict[str, Any] | None:
    """What a record value says, parsed by Python's JSON (NaN/Infinity allowed, as Spark's JSON reader allows)."""
    if value is None:
        return None
    try:
        doc = json.loads(value.decode("utf-8", "replace"))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def run_records(spark: SparkSession, seed: int, count: int, work: Path) -> tuple[Counter[str], list[str]]:
    """Parse ``count`` mutated record values as the bronze stage parses them (the quickstart's schema, one Spark
    job); each record's outcome and the bad ones. A record must land in bronze with the values it says, or in
    quarantine with a reason; undeclared fields fail the batch with ``SchemaMismatchError`` (``drift = "fail"``).
    Runs on the driver."""
    import pyspark.sql.functions as F

    from sparkonce.errors import SchemaMismatchError
    from sparkonce.pipeline.kinds.bronze import ROUTE_COLUMN, parse_raw, payload_fields, routed_frame
    from sparkonce.pipeline.loader import parse_pipeline
    from sparkonce.pipeline.model import BronzeStage
    from sparkonce_local.demo_pipeline import quickstart_pipeline

    config = parse_pipeline(quickstart_pipeline("localhost:1", tables=str(work / "tables")), work / "p.toml")
    stage = next(s for s in config.stages if isinstance(s, BronzeStage))
    records = mutated_records(seed, count)
    rows = [(None, value, "events", 0, i, datetime(2026, 11, 26, tzinfo=UTC)) for i, (_, value) in enumerate(records)]
    kafka = spark.createDataFrame(
        rows, "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"
    )
    raw = kafka.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
    )
    frame = routed_frame(raw, stage, payload_fields(spark, stage))
    extra = frame.columns[-1]
    got = {
        r["offset"]: r
        for r in frame.select(
            ROUTE_COLUMN, "offset", "_q_reason", extra, *[f"_b_{f.name}" for f in stage.fields]
        ).collect()
    }
    outcomes: Counter[str] = Counter()
    bad: list[str] = []
    drifted = 0
    for i, (how, value) in enumerate(records):
        row = got.get(i)
        if row is None:
            outcomes["wrong-answer"] += 1
            bad.append(f"record {i} ({how}) {value!r}: lost by the parse")
            continue
        if row[extra]:
            drifted += 1
            outcomes["clear-error"] += 1  # drift = "fail": the batch fails with SchemaMismatchError
            continue
        if row[ROUTE_COLUMN] != "bronze":
            outcomes["clear-error" if row["_q_reason"] else "wrong-answer"] += 1
            if not row["_q_reason"]:
                bad.append(f"record {i} ({how}) {value!r}: quarantined without a reason")
            continue
        says = _bronze_says(value)
        problem = None
        if says is None:
            problem = "in bronze but not a JSON object"
        else:
            device = says.get("device_id")
            if isinstance(device, str):  # a lone surrogate (JSON "\\ud800") has no UTF-8 form: Spark stores "?"
                device = device.encode("utf-8", "replace").decode("utf-8")
            if not isinstance(row["_b_device_id"], str) or (isinstance(device, str) and row["_b_device_id"] != device):
                problem = f"device_id {row['_b_device_id']!r} but the record says {says.get('device_id')!r}"
            want = _float(says.get("value"))
            have = row["_b_value"]
            if want is None or have is None or not (have == want or (math.isnan(have) and math.isnan(want))):
                problem = f"value {have!r} but the record says {says.get('value')!r}"
            when = says.get("reading_time")
            seconds = _float(when)  # Spark's from_json reads a number as seconds since the epoch
            if row["_b_reading_time"] is None or not (
                isinstance(when, str)
                or (seconds is not None and math.isfinite(seconds) and row["_b_reading_time"].timestamp() == seconds)
            ):
                problem = f"reading_time {row['_b_reading_time']!r} but the record says {says.get('reading_time')!r}"
        if problem:
            outcomes["wrong-answer"] += 1
            bad.append(f"record {i} ({how}) {value!r}: {problem}")
        else:
            outcomes["ok"] += 1
    if drifted:  # the batch as the stage runs it: drift = "fail" names the undeclared fields
        try:
            parse_raw(raw, stage, batch_id=0)
            outcomes["wrong-answer"] += 1
            bad.append(f"{drifted} record(s) with undeclared fields, but the batch parsed")
        except SchemaMismatchError:
            pass
    return outcomes, bad
