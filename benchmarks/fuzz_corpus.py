"""The fuzz corpus (issue 26): seeded damaged files fed to sparkonce's readers, and malformed Kafka record values fed
to the bronze stage's parse.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/fuzz_corpus.py --seed S --cases N [--records R]``. ``--cases``
damaged files (checkpoint ``metadata``/``offsets``/``commits``/``sources``, a Delta source's offsets,
``_spark_metadata``, Delta JSON commits, Parquet checkpoints, ``_last_checkpoint``; the engine and the reads are
``tests/fuzz_corpus.py``, whose seeded sample runs in ``tests/unit/test_fuzz_files.py``) and ``--records`` mutated
record values (default 0: no Spark), parsed in one Spark job as the bronze stage parses them (the quickstart's
schema). A record must land in bronze with the values it says, or in quarantine with a reason; undeclared fields
fail the batch with ``SchemaMismatchError`` (``drift = "fail"``).

Prints counts per format and outcome (ok / clear-error / traceback / wrong-answer) and every bad case; exits 1
on any traceback or wrong answer.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz_corpus import (  # noqa: E402
    BYTE_MUTATIONS,
    JSON_MUTATIONS,
    OUTCOMES,
    CorpusResult,
    build_world,
    mutate,
    run_corpus,
)

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


def run_records(seed: int, count: int, work: Path) -> tuple[Counter[str], list[str]]:
    """Parse the mutated records as the bronze stage does; each record's outcome and the bad ones."""
    import pyspark.sql.functions as F

    from sparkonce.errors import SchemaMismatchError
    from sparkonce.pipeline.kinds.bronze import ROUTE_COLUMN, parse_raw, payload_fields, routed_frame
    from sparkonce.pipeline.loader import parse_pipeline
    from sparkonce.pipeline.model import BronzeStage
    from sparkonce.spark import local_session
    from sparkonce_local.demo_pipeline import quickstart_pipeline

    config = parse_pipeline(quickstart_pipeline("localhost:1", tables=str(work / "tables")), work / "p.toml")
    stage = next(s for s in config.stages if isinstance(s, BronzeStage))
    spark = local_session(app_name="fuzz-records")
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
    frame = routed_frame(raw, stage, payload_fields(spark, stage), batch_id=0)
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
            if not isinstance(row["_b_device_id"], str) or (
                isinstance(says.get("device_id"), str) and row["_b_device_id"] != says["device_id"]
            ):
                problem = f"device_id {row['_b_device_id']!r} but the record says {says.get('device_id')!r}"
            want = _float(says.get("value"))
            have = row["_b_value"]
            if want is None or have is None or not (have == want or (math.isnan(have) and math.isnan(want))):
                problem = f"value {have!r} but the record says {says.get('value')!r}"
            if row["_b_reading_time"] is None or not isinstance(says.get("reading_time"), str):
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--records", type=int, default=0)
    args = parser.parse_args()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as tmp:
        started = time.perf_counter()
        world = build_world(Path(tmp) / "world", ROOT / "tests" / "fixtures")
        result: CorpusResult = run_corpus(world, seed=args.seed, cases=args.cases)
        seconds = time.perf_counter() - started
        formats = sorted({f for f, _ in result.counts})
        print(f"fuzz corpus: seed {args.seed}, {args.cases} file cases, {seconds:.0f} s")
        print(f"{'format':<18}" + "".join(f"{o:>14}" for o in OUTCOMES))
        for fmt in formats:
            print(f"{fmt:<18}" + "".join(f"{result.counts[(fmt, o)]:>14}" for o in OUTCOMES))
        totals = {o: sum(v for (_, oo), v in result.counts.items() if oo == o) for o in OUTCOMES}
        print(f"{'total':<18}" + "".join(f"{totals[o]:>14}" for o in OUTCOMES))
        print("clear errors by type (per read): " + ", ".join(f"{k} {v}" for k, v in result.errors.most_common()))
        bad += result.bad
        from sparkonce.delta.commit import load_table

        for table in world.tables:  # delta-rs still works after the panics it may have raised on damaged files
            try:
                load_table(str(table)).version()
            except BaseException as err:
                bad.append(f"the undamaged table {table} no longer opens after the corpus: {type(err).__name__}: {err}")
        if args.records:
            started = time.perf_counter()
            outcomes, record_bad = run_records(args.seed, args.records, Path(tmp))
            seconds = time.perf_counter() - started
            print(
                f"kafka records: {args.records} through the bronze parse, {seconds:.0f} s: "
                + ", ".join(f"{o} {outcomes[o]}" for o in OUTCOMES)
            )
            bad += record_bad
    for line in bad[:200]:
        print("BAD", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
