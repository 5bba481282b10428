"""Reading a Delta table with deletion vectors vs reading the same rows from a table without them, same run.

Run: ``.venv/bin/python benchmarks/bench_deletion_vectors.py [--files 8] [--rows-per-file 500000] [--repeat 3]
[--delete-every 10]``.

1. Writes table ``plain`` with the Delta sink (``files`` files), then builds ``with_dv``: a copy whose extra commit
   upgrades the protocol to the ``deletionVectors`` reader feature and re-adds every file with a deletion vector
   (portable RoaringBitmapArray, Delta's file framing and CRC) deleting every ``--delete-every``-th row, as
   Delta's DELETE does without rewriting files.
2. Writes ``survivors``: the rows ``with_dv`` keeps, rewritten without deletion vectors (same number of files).
3. Reads ``with_dv`` (on the native path, which drops deleted rows by a vectorized filter on
   ``_metadata.row_index``, and through the Python data source) and ``survivors`` (native) into the ``noop`` sink,
   every column and one column, alternated, best of ``--repeat``, and prints rows/s of each, the ratio with_dv /
   survivors (target >= 0.8) and native / Python source on the DV table.

Asserts only that both reads return the same number of rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from pyroaring import BitMap64
from rich.console import Console
from rich.table import Table

from sparkonce.delta.table.deletion_vectors import PORTABLE_MAGIC
from sparkonce.spark import local_session

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        number = int.from_bytes(data[i : i + 4], "big")
        digits = []
        for _ in range(5):
            number, digit = divmod(number, 85)
            digits.append(_Z85[digit])
        out.append("".join(reversed(digits)))
    return "".join(out)


def write_dv_file(table: Path, rows: list[int]) -> dict[str, Any]:
    """One DV file holding ``rows``; returns the ``deletionVector`` descriptor (storage type ``u``)."""
    bitmap = BitMap64(rows)
    data = struct.pack("<i", PORTABLE_MAGIC) + bitmap.serialize()
    file_id = uuid.uuid4()
    with open(table / f"deletion_vector_{file_id}.bin", "wb") as handle:
        handle.write(b"\x01")
        handle.write(struct.pack(">i", len(data)))
        handle.write(data)
        handle.write(struct.pack(">I", zlib.crc32(data)))
    return {
        "storageType": "u",
        "pathOrInlineDv": z85_encode(file_id.bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }


def add_deletion_vectors(source: Path, target: Path, delete_every: int) -> int:
    """Copy ``source`` to ``target`` and commit DVs deleting rows with ``id % delete_every == 3``; return how
    many rows survive."""
    shutil.copytree(source, target)
    log = target / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("*.json"))
    adds: dict[str, dict[str, Any]] = {}
    for version in range(latest + 1):
        for line in (log / f"{version:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds[action["add"]["path"]] = action["add"]
            if "remove" in action:
                adds.pop(action["remove"]["path"], None)
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        },
    ]
    survivors = 0
    for path, add in adds.items():
        ids = pq.read_table(target / path, columns=["id"]).column("id").to_numpy()
        positions = np.flatnonzero(ids % delete_every == 3).tolist()
        survivors += len(ids) - len(positions)
        descriptor = write_dv_file(target, positions)
        actions.append({"remove": {"path": path, "deletionTimestamp": now, "dataChange": True}})
        actions.append({"add": {**add, "dataChange": True, "deletionVector": descriptor}})
    (log / f"{latest + 1:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return survivors


def read_noop(spark: Any, path: Path, *, native: bool = True, column: str | None = None) -> float:
    """Seconds to read the table into ``noop`` (every column, or only ``column``), on the native path or the Python
    data source."""
    spark.conf.set("spark.sparkonce.nativeReads", str(native).lower())
    try:
        start = time.perf_counter()
        frame = spark.read.format("delta").load(str(path))
        if column is not None:
            frame = frame.select(column)
        frame.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start
    finally:
        spark.conf.unset("spark.sparkonce.nativeReads")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--delete-every", type=int, default=10)
    args = parser.parse_args()

    spark = local_session(app_name="bench-deletion-vectors")
    work = Path(tempfile.mkdtemp(prefix="bench-dv-"))
    try:
        rows = args.files * args.rows_per_file
        df = spark.range(0, rows, numPartitions=args.files).selectExpr(
            "id",
            "concat('device-', cast(id % 1000 as string)) as device",
            "cast(id % 9973 as double) / 7 as value",
            "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as payload",
        )
        df.write.format("delta").mode("append").save(str(work / "plain"))
        survivors = add_deletion_vectors(work / "plain", work / "with_dv", args.delete_every)
        (
            spark.read.format("delta")
            .load(str(work / "plain"))
            .where(f"id % {args.delete_every} != 3")
            .repartition(args.files)
            .write.format("delta")
            .mode("append")
            .save(str(work / "survivors"))
        )
        counts = {name: spark.read.format("delta").load(str(work / name)).count() for name in ("with_dv", "survivors")}
        assert counts == {"with_dv": survivors, "survivors": survivors}, counts

        runs = {
            "with_dv, native": ("with_dv", True, None),
            "with_dv, Python source": ("with_dv", False, None),
            "survivors, native": ("survivors", True, None),
            "with_dv, one column, native": ("with_dv", True, "value"),
            "with_dv, one column, Python source": ("with_dv", False, "value"),
            "survivors, one column, native": ("survivors", True, "value"),
        }
        best = dict.fromkeys(runs, float("inf"))
        read_noop(spark, work / "survivors")  # warm-up
        read_noop(spark, work / "with_dv")
        for _ in range(args.repeat):
            for name, (folder, native, column) in runs.items():
                best[name] = min(best[name], read_noop(spark, work / folder, native=native, column=column))
        table = Table(title=f"Delta batch read, {survivors:,} rows kept of {rows:,} ({args.files} files)")
        table.add_column("read")
        table.add_column("seconds", justify="right")
        table.add_column("rows/s", justify="right")
        for name, seconds in best.items():
            table.add_row(name, f"{seconds:.2f}", f"{survivors / seconds:,.0f}")
        Console().print(table)
        for suffix in ("", ", one column"):
            dv, plain = best[f"with_dv{suffix}, native"], best[f"survivors{suffix}, native"]
            python = best[f"with_dv{suffix}, Python source"]
            Console().print(
                f"{suffix.strip(', ') or 'every column'}: with deletion vectors / without, rows/s: "
                f"[bold]{plain / dv:.2f}x[/bold] (target >= 0.8); native / Python source on the DV table, time: "
                f"[bold]{dv / python:.2f}x[/bold]"
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
