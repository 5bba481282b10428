"""What a Delta log checkpoint costs sparkonce as tombstones and active files grow, next to delta-rs on the same table.

Run: ``.venv/bin/python benchmarks/bench_checkpoint_size.py [--sizes 10000:10000 10000:100000 10000:300000
100000:100000] [--repeat 3]`` (each size ``FILES:TOMBSTONES``).

A stream's table keeps a week of ``remove`` tombstones (``delta.deletedFileRetentionDuration``): 10^5..10^6 rows
in every checkpoint. For each size a table is generated directly: commit 0 (protocol, metadata, 10 partitions),
commit 1 with ``FILES`` adds (with stats) and ``TOMBSTONES`` removes of other files (deleted a second ago, so a
checkpoint keeps them all). Then, same run, side by side (best of ``--repeat``):

* **write (replayed)**: sparkonce's ``write_checkpoint`` of the snapshot replayed from the JSON commits;
* **read**: sparkonce's ``DeltaLog(t).snapshot()`` starting from that checkpoint (the open of every new process);
* **write (kept)**: ``write_checkpoint`` of the snapshot read from the checkpoint (what a running stream does every
  ``delta.checkpointInterval`` commits);
* **update**: ``DeltaLog.update`` of the kept snapshot over one more commit (1 add, 1 remove: a batch);
* **sink batch**: mean of 20 streaming batch commits as the sink makes them in one process (``commit_files`` with a
  ``txn``), two of them writing a checkpoint (``delta.checkpointInterval`` 10) with its log cleanup;
* **delta-rs open**: ``deltalake.DeltaTable(t)`` (from sparkonce's checkpoint) and **delta-rs checkpoint**:
  ``create_checkpoint()`` of the same table version by a ``DeltaTable`` loaded from it, the checkpoint removed
  before each run (delta-rs writes none where one exists): the baselines.

Prints a table and the ratios sparkonce / delta-rs. Asserts nothing. The machine is shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from rich.console import Console
from rich.table import Table

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.log_checkpoint import write_checkpoint
from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.log.table_view import forget_table
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.storage import table_location

console = Console(width=160)


def best(repeat: int, run: Callable[[], Any], *, before: Callable[[], Any] | None = None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def _commit(root: Path, table_version: int, lines: list[dict[str, Any]]) -> None:
    with open(root / "_delta_log" / f"{table_version:020d}.json", "w") as out:
        out.write("\n".join(json.dumps(line) for line in lines) + "\n")


def make_table(root: Path, files: int, tombstones: int) -> None:
    (root / "_delta_log").mkdir(parents=True)
    now = int(time.time() * 1000)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": ["part"],
        "configuration": {},
        "createdTime": now,
    }
    info = {"commitInfo": {"timestamp": now, "operation": "WRITE"}}
    _commit(root, 0, [info, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": meta}])
    lines: list[dict[str, Any]] = [info, {"txn": {"appId": "bench", "version": 1, "lastUpdated": now}}]
    for i in range(files):
        stats = {"numRecords": 100, "minValues": {"id": i}, "maxValues": {"id": i + 99}, "nullCount": {"id": 0}}
        add = {
            "path": f"part={i % 10}/part-{i:08d}-{uuid.UUID(int=i)}.c000.snappy.parquet",
            "partitionValues": {"part": str(i % 10)},
            "size": 1000 + i,
            "modificationTime": now,
            "dataChange": True,
            "stats": json.dumps(stats),
        }
        lines.append({"add": add})
    for i in range(tombstones):
        remove = {
            "path": f"part={i % 10}/part-r{i:08d}-{uuid.UUID(int=i)}.c000.snappy.parquet",
            "deletionTimestamp": now - 1000,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {"part": str(i % 10)},
            "size": 1000,
        }
        lines.append({"remove": remove})
    _commit(root, 1, lines)


def sink_batches(root: Path, batches: int) -> float:
    """Mean time of the driver side of ``batches`` streaming batches as the sink makes them in one process
    (``commit_files`` of one file with the query's ``txn``; the file is not read), after one batch that loads the
    table: table versions 2..21, so two checkpoints (at 10 and 20) and their log cleanup are included."""
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    written = WrittenFile("part=0/batch.parquet", 1000, {"part": "0"}, 0, 10, '{"numRecords":10}')

    def batch(batch_id: int) -> None:
        commit_files(str(root), [written], data_schema=schema, partition_by=("part",), txn=BatchTxn("s", batch_id))

    forget_table(str(root))
    batch(0)
    started = time.perf_counter()
    for batch_id in range(1, batches + 1):
        batch(batch_id)
    assert DeltaLog(root).snapshot().checkpoint_version == 20
    return (time.perf_counter() - started) / batches


def measure(files: int, tombstones: int, repeat: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    try:
        root = work / "t"
        make_table(root, files, tombstones)
        location = table_location(str(root))
        replayed = DeltaLog(root).snapshot()
        out = {"write (replayed)": best(repeat, lambda: write_checkpoint(location, replayed))}
        out["read"] = best(repeat, lambda: DeltaLog(root).snapshot())
        kept = DeltaLog(root).snapshot()
        assert kept.checkpoint_version == 1 and len(kept.files) == files
        out["write (kept)"] = best(repeat, lambda: write_checkpoint(location, kept))
        out["delta-rs open"] = best(repeat, lambda: DeltaTable(str(root)))
        assert DeltaTable(str(root)).version() == 1
        batch = [
            {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
            {"add": {"path": "part=0/new.parquet", "partitionValues": {"part": "0"}, "size": 1, "modificationTime": 1}},
        ]
        first = next(iter(kept.files.values()))
        batch.append({"remove": {"path": first["path"], "deletionTimestamp": int(time.time() * 1000)}})
        _commit(root, 2, batch)
        out["update"] = best(repeat, lambda: DeltaLog(root).update(kept))
        (root / "_delta_log" / f"{2:020d}.json").unlink()
        table = DeltaTable(str(root))

        def no_checkpoint() -> None:  # delta-rs writes none when the table version has one
            for name in ("00000000000000000001.checkpoint.parquet", "_last_checkpoint"):
                (root / "_delta_log" / name).unlink(missing_ok=True)

        out["delta-rs checkpoint"] = best(repeat, table.create_checkpoint, before=no_checkpoint)
        assert (root / "_delta_log" / "_last_checkpoint").exists()
        out["sink batch"] = sink_batches(root, 20)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["10000:10000", "10000:100000", "10000:300000", "100000:100000"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    table = Table(title="Delta log checkpoint of FILES active files and TOMBSTONES tombstones (best of runs, ms)")
    columns = ["write (replayed)", "read", "write (kept)", "update", "sink batch"]
    columns += ["delta-rs open", "delta-rs checkpoint"]
    for name in ["files", "tombstones", *columns, "read / delta-rs open", "write (kept) / delta-rs checkpoint"]:
        table.add_column(name, justify="right")
    measure(100, 100, 1)  # warm-up: imports, first Parquet read and write
    for size in args.sizes:
        files, tombstones = (int(n) for n in size.split(":"))
        got = measure(files, tombstones, args.repeat)
        table.add_row(
            f"{files:,}",
            f"{tombstones:,}",
            *(f"{got[c] * 1000:,.1f}" for c in columns),
            f"{got['read'] / got['delta-rs open']:.2f}x",
            f"{got['write (kept)'] / got['delta-rs checkpoint']:.2f}x",
        )
        console.print(f"{files:,} files, {tombstones:,} tombstones: done")
    console.print(table)


if __name__ == "__main__":
    main()
