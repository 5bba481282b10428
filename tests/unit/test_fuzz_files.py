"""Bad-input fuzzing of ``doctor`` and the file readers: truncations, byte flips, deletions and insertions over
checkpoint files (``metadata``, ``offsets/N``, ``commits/N``, ``sources/``, ``_spark_metadata``) and Delta log files
(JSON commits, classic and multi-part Parquet checkpoints, ``_last_checkpoint``).

Every case must end in a report (findings) or an error of sparkonce's error tree whose message names a file under
the damaged checkpoint or table: never another exception (a traceback for the user). Cases are drawn from a seeded
generator; ``SPARKONCE_FUZZ_CASES`` and ``SPARKONCE_FUZZ_SEED`` run more or other cases (the default, 2,000 cases,
takes well under a minute on a quiet machine).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkonce.checkpoint import read_checkpoint
from sparkonce.checkpoint.file_log import read_file_log
from sparkonce.delta.log import DeltaLog
from sparkonce.errors import SparkonceError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.ops.doctor import diagnose
from sparkonce.ops.history import table_history
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

QID = "11111111-2222-3333-4444-555555555555"
CASES = int(os.environ.get("SPARKONCE_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("SPARKONCE_FUZZ_SEED", "20261123"))
MUTATIONS = ("truncate", "flip-bit", "random-byte", "delete-range", "insert-bytes", "empty", "delete-file")


@dataclass(frozen=True)
class Target:
    """A file to damage, the root it belongs to, and the reads to run on it."""

    path: Path
    root: Path
    kind: str


def _no_broker(partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    return {tp: (0, 10**9) for tp in partitions}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> dict[str, Path]:
    """A Kafka query's checkpoint (with ``sources/0/0``), its Delta sink with a Parquet checkpoint, two of Delta's
    golden tables (classic and multi-part checkpoints) and a file sink's ``_spark_metadata``."""
    root = tmp_path_factory.mktemp("fuzz")
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
    return {
        "cp": cp,
        "sink": sink,
        "golden": root / "golden-checkpoint",
        "multi": root / "golden-multipart",
        "file_sink": file_sink,
    }


def _targets(world: dict[str, Path]) -> list[Target]:
    out = [Target(p, world["cp"], "checkpoint") for p in sorted(world["cp"].rglob("*")) if p.is_file()]
    out += [
        Target(p, world["file_sink"], "file-sink") for p in sorted((world["file_sink"] / "_spark_metadata").iterdir())
    ]
    for name in ("sink", "golden", "multi"):
        log = world[name] / "_delta_log"
        out += [Target(p, world[name], "delta") for p in sorted(log.iterdir()) if p.is_file() and ".crc" not in p.name]
    return out


def _mutate(data: bytes, how: str, rng: random.Random) -> bytes | None:
    """The damaged bytes (``None``: delete the file)."""
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
    noise = rng.choice([b"\x00", b"\xff\xfe", b"{", b"}", b'"', b"\n", b"v99\n", b"-1", b"9" * 30, b"\xc3("])
    return data[:i] + noise + data[i:]


def _reads(target: Target, world: dict[str, Path]) -> list[Callable[[], Any]]:
    """Everything that reads the damaged file: the reader itself and the doctor over it."""
    cp = world["cp"]
    if target.kind == "checkpoint":
        return [
            lambda: read_checkpoint(cp),
            lambda: diagnose(cp, watermarks=_no_broker, checkpoint_scan="full"),
        ]
    if target.kind == "file-sink":
        return [
            lambda: read_file_log(world["file_sink"] / "_spark_metadata"),
            lambda: diagnose(cp, tables=[world["file_sink"]]),
        ]
    table = target.root
    return [
        lambda: DeltaLog(table).snapshot(),
        lambda: table_history(table, limit=3),
        lambda: diagnose(cp, tables=[table], history_scan="full"),
    ]


def test_damaged_files_never_crash_the_readers_or_the_doctor(world: dict[str, Path]) -> None:
    rng = random.Random(SEED)
    targets = _targets(world)
    assert {t.kind for t in targets} == {"checkpoint", "file-sink", "delta"}
    assert any(".checkpoint." in t.path.name and t.path.name.endswith(".parquet") for t in targets)
    assert any(t.path.name == "_last_checkpoint" for t in targets)
    outcomes: Counter[str] = Counter()
    crashes: list[str] = []
    for case in range(CASES):
        target = rng.choice(targets)
        how = rng.choice(MUTATIONS)
        original = target.path.read_bytes()
        damaged = _mutate(original, how, rng)
        if damaged is None:
            target.path.unlink()
        else:
            target.path.write_bytes(damaged)
        try:
            for read in _reads(target, world):
                try:
                    read()
                    outcomes["read"] += 1
                except SparkonceError as err:
                    outcomes[type(err).__name__] += 1
                    if str(target.root) not in str(err):
                        crashes.append(f"case {case} {how} {target.path}: error names no file of it: {err}")
                except Exception as err:  # the point of the test: anything else is a crash
                    frame = traceback.extract_tb(err.__traceback__)[-1]
                    where = f"{Path(frame.filename).name}:{frame.lineno}"
                    crashes.append(f"case {case} {how} {target.path}: {type(err).__name__}: {err} at {where}")
        finally:
            target.path.write_bytes(original)
    kinds = sorted({re.sub(r"\d+", "N", c.split(": ", 1)[1].split("/")[-1])[:160] for c in crashes})
    assert not crashes, f"{len(crashes)} crash(es) (seed {SEED}), {len(kinds)} kinds:\n" + "\n".join(
        [*crashes[:5], "kinds:", *kinds[:40]]
    )
    assert outcomes["read"] and sum(v for k, v in outcomes.items() if k != "read"), outcomes
