"""Benchmark ``doctor`` at 10,000 and 100,000 batches / table versions, on a table whose newest table version
references 100,000 data files, and ``verify`` on 10 million rows.

Run: ``.venv/bin/python benchmarks/bench_doctor.py [--sizes 10000 100000] [--files 100000]
[--verify-rows 10000000]``. Prints times and the 100k/10k ratio (linear growth gives about 10; the Delta snapshot,
which starts from a Delta checkpoint, should stay flat). ``doctor`` reads the timeline window's checkpoint files
(the default); ``doctor full`` reads every ``offsets/``/``commits/`` file (``checkpoint_scan="full"``); ``trace``
is what a damaged file of table version 0 costs on top (every Delta commit read back to it). ``--files`` times the
check of every referenced file against one listing of the table (``delta-missing-files``). Prints only; nothing is
asserted. Files are generated directly (no Spark, no delta-rs for the log), in a temporary folder removed at the
end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkonce.checkpoint import OffsetSeqMetadata, format_commit, format_metadata, format_offsets, read_checkpoint
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.ops.doctor import diagnose
from sparkonce.ops.doctor.orphans import check_files, trace_origins
from sparkonce.ops.verify import verify_table

QUERY_ID = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ),
    "spark.sql.shuffle.partitions": "200",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
}
CHECKPOINT_EVERY = 1000  # Delta checkpoint interval used for the generated table


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


def make_checkpoint(root: Path, batches: int) -> None:
    """A Kafka query's checkpoint: 8 partitions, 1000 records per partition per batch."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    _write(root / "metadata", format_metadata(QUERY_ID))
    commit = format_commit()
    for b in range(batches):
        ends = {str(p): (b + 1) * 1000 for p in range(8)}
        line = json.dumps({"events": ends}, separators=(",", ":"))
        _write(
            root / "offsets" / str(b),
            format_offsets(metadata=OffsetSeqMetadata(0, 1_700_000_000_000 + b * 1000, CONF), sources=[line]),
        )
        _write(root / "commits" / str(b), commit)


def _checkpoint_table(version: int, active: str, meta: dict[str, Any], protocol: dict[str, Any]) -> pa.Table:
    add = {"path": active, "partitionValues": [], "size": 1000, "modificationTime": 0, "dataChange": False}
    txn = {"appId": QUERY_ID, "version": version, "lastUpdated": 0}
    meta_row = {**meta, "format": {"provider": "parquet", "options": []}, "configuration": []}
    rows = [
        {"add": add, "txn": None, "metaData": None, "protocol": None},
        {"add": None, "txn": txn, "metaData": None, "protocol": None},
        {"add": None, "txn": None, "metaData": meta_row, "protocol": None},
        {"add": None, "txn": None, "metaData": None, "protocol": protocol},
    ]
    string_map = pa.map_(pa.string(), pa.string())
    schema = pa.schema(
        [
            (
                "add",
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", string_map),
                        ("size", pa.int64()),
                        ("modificationTime", pa.int64()),
                        ("dataChange", pa.bool_()),
                    ]
                ),
            ),
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
            (
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", string_map)])),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                        ("configuration", string_map),
                        ("createdTime", pa.int64()),
                    ]
                ),
            ),
            ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def make_table(root: Path, versions: int) -> None:
    """A streaming table: each Delta commit is one batch (txn + sparkonce commitInfo) replacing the previous file,
    like Delta's golden ``checkpoint`` table; a Delta checkpoint every 1000 versions. Only the newest table
    version's file is on disk (1000 bytes of filler, never read): the table is healthy."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "offset", "type": "long", "nullable": True, "metadata": {}}]}
    meta = {
        "id": "bench",
        "schemaString": json.dumps(schema),
        "partitionColumns": [],
        "createdTime": 0,
    }
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    for v in range(versions):
        ours = {
            "operation": "STREAMING UPDATE",
            "operationParameters": {"outputMode": "Append", "queryId": QUERY_ID, "epochId": str(v)},
            "batchId": v,
        }
        actions: list[dict[str, Any]] = [
            {"commitInfo": {"timestamp": v, "operation": "WRITE", "sparkonce": ours}},
            {"txn": {"appId": QUERY_ID, "version": v}},
            {
                "add": {
                    "path": f"f{v}",
                    "partitionValues": {},
                    "size": 1000,
                    "modificationTime": v,
                    "dataChange": True,
                    "stats": '{"numRecords":8000}',
                }
            },
        ]
        if v == 0:
            actions += [{"protocol": protocol}, {"metaData": {**meta, "format": {"provider": "parquet"}}}]
        else:
            actions.append({"remove": {"path": f"f{v - 1}", "deletionTimestamp": v, "dataChange": True}})
        _write(log / f"{v:020d}.json", "\n".join(json.dumps(a) for a in actions) + "\n")
        if v and v % CHECKPOINT_EVERY == 0:
            pq.write_table(_checkpoint_table(v, f"f{v}", meta, protocol), log / f"{v:020d}.checkpoint.parquet")
            _write(log / "_last_checkpoint", json.dumps({"version": v, "size": 4}))
    (root / f"f{versions - 1}").write_bytes(b"\0" * 1000)


def make_wide_table(root: Path, files: int) -> None:
    """One streaming batch (table version 0) adding ``files`` files of 100 bytes in 100 partition folders."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "p", "type": "integer", "nullable": True, "metadata": {}}]}
    ours = {"operation": "STREAMING UPDATE", "operationParameters": {"queryId": QUERY_ID, "epochId": "0"}, "batchId": 0}
    lines = [
        {"commitInfo": {"timestamp": 0, "operation": "STREAMING UPDATE", "sparkonce": ours}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "wide",
                "format": {"provider": "parquet"},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["p"],
                "createdTime": 0,
            }
        },
        {"txn": {"appId": QUERY_ID, "version": 0}},
    ]
    for p in range(100):
        (root / f"p={p}").mkdir()
    for i in range(files):
        path = f"p={i % 100}/part-{i:06d}.parquet"
        (root / path).write_bytes(b"\0" * 100)
        lines.append({"add": {"path": path, "partitionValues": {"p": str(i % 100)}, "size": 100, "dataChange": True}})
    _write(log / f"{0:020d}.json", "\n".join(json.dumps(a) for a in lines) + "\n")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_doctor(sizes: list[int], work: Path) -> None:
    print(
        f"doctor: checkpoint with N batches (8 Kafka partitions) + Delta table with N table versions "
        f"(Delta checkpoint every {CHECKPOINT_EVERY})"
    )
    header = (
        f"{'N':>8} {'generate s':>11} {'read ckpt s':>12} {'snapshot s':>11} {'doctor s':>9} {'findings':>9} "
        f"{'doctor full s':>14} {'trace s':>8}"
    )
    print(header)
    results: dict[int, dict[str, float]] = {}
    for n in sizes:
        cp, table = work / f"cp-{n}", work / f"table-{n}"
        gen, _ = timed(lambda cp=cp, table=table, n=n: (make_checkpoint(cp, n), make_table(table, n)))
        t_read, _ = timed(lambda cp=cp: read_checkpoint(cp))
        t_snap, snap = timed(lambda table=table: DeltaLog(table).snapshot())
        assert snap.txn_version(QUERY_ID) == n - 1
        t_doc, report = timed(lambda cp=cp, table=table: diagnose(cp, tables=[table]))
        t_full, _ = timed(lambda cp=cp, table=table: diagnose(cp, tables=[table], checkpoint_scan="full"))
        # A file of table version 0 damaged: every Delta commit is read back to the one that added it.
        t_trace, origins = timed(lambda table=table, n=n: trace_origins(DeltaLog(table), n - 1, ["not-a-file"]))
        assert len(origins.commits) == n
        results[n] = {"read": t_read, "snapshot": t_snap, "doctor": t_doc, "doctor full": t_full}
        print(
            f"{n:>8} {gen:>11.2f} {t_read:>12.2f} {t_snap:>11.3f} {t_doc:>9.2f} {len(report.findings):>9} "
            f"{t_full:>14.2f} {t_trace:>8.2f}"
        )
        shutil.rmtree(cp)
        shutil.rmtree(table)
    if len(sizes) >= 2:
        small, big = sizes[0], sizes[-1]
        print(
            f"ratio {big}/{small}: "
            + ", ".join(
                f"{k} {results[big][k] / max(results[small][k], 1e-9):.1f}x"
                for k in ("read", "snapshot", "doctor", "doctor full")
            )
            + f" (size ratio {big / small:.0f}x)"
        )


def bench_files(files: int, work: Path) -> None:
    """``doctor`` on a table whose newest table version references ``files`` files: each one checked, for
    existence and size, against one listing of the table."""
    cp, table = work / "cp-wide", work / "table-wide"
    gen, _ = timed(lambda: (make_checkpoint(cp, 1), make_wide_table(table, files)))
    log = DeltaLog(table)
    snap = log.snapshot()
    t_check, checked = timed(lambda: check_files(log, snap))
    assert not checked.damaged and not checked.orphans
    t_doc, report = timed(lambda: diagnose(cp, tables=[table]))
    assert report.healthy, report.findings
    os.remove(table / "p=7" / f"part-{7:06d}.parquet")
    t_bad, report = timed(lambda: diagnose(cp, tables=[table]))
    assert [f.code for f in report.findings] == ["delta-missing-files"]
    print(
        f"doctor, table version 0 referencing {files:,} files (generated in {gen:.1f}s): check against one listing "
        f"{t_check:.2f}s, doctor {t_doc:.2f}s, doctor with one file deleted {t_bad:.2f}s"
    )
    shutil.rmtree(cp)
    shutil.rmtree(table)


def bench_verify(rows: int, work: Path) -> None:
    from deltalake import write_deltalake

    table = work / "raw"
    partitions = 16
    per = rows // partitions
    files = 10
    start = time.perf_counter()
    import numpy as np

    for i in range(files):
        lo, hi = i * per // files, (i + 1) * per // files
        offsets = np.tile(np.arange(lo, hi, dtype=np.int64), partitions)
        parts = np.repeat(np.arange(partitions, dtype=np.int32), hi - lo)
        data = pa.table(
            {
                "topic": pa.DictionaryArray.from_arrays(np.zeros(len(offsets), np.int32), ["events"]).cast(pa.string()),
                "partition": parts,
                "offset": offsets,
                "value": pa.array(np.zeros(len(offsets), dtype=np.int8)),
            }
        )
        write_deltalake(str(table), data, mode="append")
    # a replayed batch: 1000 duplicated offsets in partition 0
    dup = pa.table(
        {
            "topic": ["events"] * 1000,
            "partition": pa.array([0] * 1000, pa.int32()),
            "offset": pa.array(range(1000), pa.int64()),
            "value": pa.array([0] * 1000, pa.int8()),
        }
    )
    write_deltalake(str(table), dup, mode="append")
    gen = time.perf_counter() - start
    expected = [OffsetRange(TopicPartition("events", p), 0, per + 5) for p in range(partitions)]
    elapsed, report = timed(lambda: verify_table(table, expected=expected))
    print(
        f"verify: {report.rows_scanned:,} rows in {report.files_read} files (generated in {gen:.1f}s): "
        f"{elapsed:.2f}s = {report.rows_scanned / elapsed:,.0f} rows/s; "
        f"{sum(p.duplicated_offsets for p in report.partitions)} duplicated, "
        f"{sum(p.missing_offsets for p in report.partitions)} missing offsets"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--verify-rows", type=int, default=10_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkonce-bench-"))
    try:
        bench_doctor(args.sizes, work)
        if args.files:
            bench_files(args.files, work)
        if args.verify_rows:
            bench_verify(args.verify_rows, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"(cpu count {os.cpu_count()})")


if __name__ == "__main__":
    main()
