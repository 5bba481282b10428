"""sparkonce against delta-spark (Delta Lake's own JVM connector) on the same work, in one run, alternated.

Run: ``bash scripts/setup_delta_oracle.sh`` once (makes ``.venv-delta``: PySpark 4.2 and delta-spark 4.4's jars),
then ``.venv/bin/python benchmarks/bench_vs_delta_spark.py [--rows 1000000] [--files 20] [--wide-columns 50]
[--stream-files 10] [--repeat 3] [--part all|work|start]``.

sparkonce runs in this process (PySpark 4.3, ``local_session``: native batch reads on); delta-spark runs in a
process of its own (``benchmarks/delta_spark_worker.py`` under ``.venv-delta``, a second JVM configured the same
way: ``local[2]``, 2 shuffle partitions, 2 GB driver). Both sides run the very same functions of
``delta_spark_worker.py``; delta-spark's side times each operation inside its process (a no-op request's round
trip is printed to show what the pipe would have added). Each round runs every operation on sparkonce, then on
delta-spark, and each figure is the best of ``--repeat`` rounds (a warm-up round of the write at 1/10 size runs
first on each side). The work:

1. **write**: ``--rows`` rows of 15 columns (``id``, ``k`` = id % 1000, a 64-character string, 12 doubles) written
   into a new Delta table as ``--files`` files of contiguous ``id`` ranges;
2. **reads** of that table (each side reads the table it wrote): full scan ``sum(id), sum(d12)``; point lookup
   ``id = rows / 2`` (data skipping on the ``--files`` files); one column of a ``--wide-columns``-column table
   (``sum(d1)``);
3. **MERGE INTO** the table (a fresh copy each round, untimed) of 10% updated rows (every tenth ``id``) and 10% new
   rows, ``WHEN MATCHED UPDATE SET * WHEN NOT MATCHED INSERT *``;
4. **streaming sink**: an ``availableNow`` stream from a Parquet folder of ``--stream-files`` files (the same 15
   columns, ``--rows`` rows, ``maxFilesPerTrigger`` = 2, so several micro-batches) into a new Delta table with a
   checkpoint; rows/s;
5. **Delta stream source**: an ``availableNow`` stream from the table of 1 (each side its own, before the MERGE),
   ``maxFilesPerTrigger`` = 2, into Spark's ``noop`` sink; rows/s of each engine's Delta source;
6. **session start** (``--part start``): a fresh Python process to its first answered query (``range(1)``), with
   sparkonce registered (``local_session``) vs with Delta's SQL extension and catalog (the worker's
   ``--start-only``); from ``Popen`` to the ``ready`` line.

Prints a table of seconds and the ratio sparkonce / delta-spark (time: below 1 means sparkonce is faster; the
stream's rows/s row: throughput, above 1 means sparkonce is faster). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from delta_spark_worker import EXTRA_JARS_ENV, JARS_ENV, run  # type: ignore[import-not-found]
from sparkonce.spark import local_session

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "delta_spark_worker.py"
COLUMNS = ["id", "id % 1000 as k", "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as s"]
COLUMNS += [f"cast(id % {97 + i} as double) / 3 as d{i + 1}" for i in range(12)]
SCHEMA = "id bigint, k bigint, s string, " + ", ".join(f"d{i + 1} double" for i in range(12))


class DeltaSpark:
    """delta-spark's side: the worker process under the oracle virtualenv. Runs on the benchmark's driver."""

    def __init__(self, venv: Path, *, extra_jars: Sequence[Path] = (), log: Path | None = None) -> None:
        """Start the worker under ``venv``; ``extra_jars`` join its session's jars; its stderr goes to ``log``."""
        env = dict(os.environ, **{JARS_ENV: str(venv / "jars")})
        env[EXTRA_JARS_ENV] = os.pathsep.join(str(jar) for jar in extra_jars)
        env.pop("PYTHONPATH", None)
        with open(log or os.devnull, "ab") as stderr:
            self.process = subprocess.Popen(
                [str(venv / "bin" / "python"), str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        hello = self._answer()
        self.version = hello["result"]["spark"]

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the delta-spark worker exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if not answer["ok"]:
            raise RuntimeError(f"delta-spark: {answer['error']}")
        return answer

    def request(self, op: str, **options: Any) -> tuple[float, Any]:
        """One operation in the worker: the seconds it took there and its result."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **options}) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        return float(answer["seconds"]), answer["result"]

    def round_trip(self) -> float:
        started = time.perf_counter()
        self.request("noop")
        return time.perf_counter() - started

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def merge_statement(path: str, rows: int) -> str:
    """10% of ``rows`` updated (every tenth id) and 10% new, as one ``MERGE INTO``."""
    projected = ", ".join(c if c != "id % 1000 as k" else "id % 1000 + 1 as k" for c in COLUMNS)
    source = (
        f"SELECT {projected} FROM range(0, {rows}, 10) "
        f"UNION ALL SELECT {projected} FROM range({rows}, {rows + rows // 10})"
    )
    return (
        f"MERGE INTO delta.`{path}` t USING ({source}) u ON t.id = u.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def bench_work(spark: Any, delta: DeltaSpark, work: Path, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """Operations 1-4, alternated: (name, best sparkonce seconds, best delta-spark seconds)."""
    sides: dict[str, Callable[..., tuple[float, Any]]] = {
        "sparkonce": lambda op, **options: run(spark, {"op": op, **options}),
        "delta-spark": delta.request,
    }
    source = work / "stream-source"
    spark.range(args.rows).selectExpr(*COLUMNS).repartition(args.stream_files).write.parquet(str(source))
    wide = [f"cast(id % {89 + i} as double) as d{i + 1}" for i in range(args.wide_columns - 1)]
    for side, call in sides.items():  # warm-up, and the wide table each side reads
        call("write", rows=args.rows // 10, exprs=COLUMNS, files=args.files, path=str(work / side / "warm"))
        call("write", rows=args.rows, exprs=["id", *wide], files=args.files, path=str(work / side / "wide"))
    reads = {
        "read: full scan sum(id), sum(d12)": {"where": None, "select": ["sum(id)", "sum(d12)"]},
        f"read: point lookup id = {args.rows // 2} ({args.files} files)": {
            "where": f"id = {args.rows // 2}",
            "select": ["id", "k"],
        },
    }
    wide_name = f"read: one column of {args.wide_columns}, sum(d1)"
    best: dict[tuple[str, str], float] = {}

    def keep(name: str, side: str, seconds: float) -> None:
        best[(name, side)] = min(best.get((name, side), seconds), seconds)

    write_name = f"write {args.rows:,} rows, {args.files} files"
    merge_name = f"MERGE {args.rows // 10:,} updated + {args.rows // 10:,} new"
    stream_name = f"stream sink: {args.stream_files} Parquet files -> Delta, availableNow"
    source_name = f"stream source: Delta, {args.files} files -> noop, availableNow"
    for round_ in range(args.repeat):
        for side, call in sides.items():
            table = str(work / side / f"t{round_}")
            keep(write_name, side, call("write", rows=args.rows, exprs=COLUMNS, files=args.files, path=table)[0])
            for name, query in reads.items():
                keep(name, side, call("read", path=table, **query)[0])
            keep(wide_name, side, call("read", path=str(work / side / "wide"), where=None, select=["sum(d1)"])[0])
            seconds, read_rows = call(
                "source_stream", path=table, files_per_trigger=2, checkpoint=str(work / side / f"source{round_}")
            )
            if read_rows != args.rows:
                raise RuntimeError(f"{side}'s Delta source read {read_rows} rows, not {args.rows}")
            keep(source_name, side, seconds)
            keep(merge_name, side, call("sql", statement=merge_statement(table, args.rows))[0])
            seconds, written = call(
                "stream",
                source=str(source),
                schema=SCHEMA,
                files_per_trigger=2,
                target=str(work / side / f"sink{round_}"),
                checkpoint=str(work / side / f"checkpoint{round_}"),
            )
            if written != args.rows:
                raise RuntimeError(f"{side}'s stream wrote {written} rows, not {args.rows}")
            keep(stream_name, side, seconds)
    names = [write_name, *reads, wide_name, source_name, merge_name, stream_name]
    return [(name, best[(name, "sparkonce")], best[(name, "delta-spark")]) for name in names]


def time_start(command: list[str], env: dict[str, str]) -> float:
    """Seconds from ``Popen`` of a fresh process to its ``ready`` line."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "ready":
            seconds = time.perf_counter() - started
            break
    else:
        raise RuntimeError(f"{command[:2]} exited ({process.wait()}) before its first query")
    process.wait(timeout=120)
    return seconds


def bench_start(venv: Path, repeat: int) -> tuple[float, float]:
    """Cold session start, alternated: best sparkonce seconds, best delta-spark seconds."""
    sparkonce_script = (
        "from sparkonce.spark import local_session\n"
        "spark = local_session(app_name='bench-start')\n"
        "spark.range(1).collect()\n"
        "print('ready', flush=True)\n"
        "spark.stop()\n"
    )
    delta_env = dict(os.environ, **{JARS_ENV: str(venv / "jars")})
    delta_env.pop("PYTHONPATH", None)
    times: dict[str, list[float]] = {"sparkonce": [], "delta-spark": []}
    for _ in range(repeat):
        times["sparkonce"].append(time_start([sys.executable, "-c", sparkonce_script], dict(os.environ)))
        times["delta-spark"].append(time_start([str(venv / "bin" / "python"), str(WORKER), "--start-only"], delta_env))
    return min(times["sparkonce"]), min(times["delta-spark"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--wide-columns", type=int, default=50)
    parser.add_argument("--stream-files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=["all", "work", "start"], default="all")
    parser.add_argument("--delta-venv", type=Path, default=REPO / ".venv-delta")
    args = parser.parse_args()
    if not (args.delta_venv / "bin" / "python").exists():
        raise SystemExit(f"no delta-spark virtualenv at {args.delta_venv}: run scripts/setup_delta_oracle.sh")
    console = Console()
    load = os.getloadavg()
    result = Table(
        title=f"sparkonce vs delta-spark, best of {args.repeat} (s); ratio = sparkonce time / delta-spark time; "
        f"load average {load[0]:.1f} at start"
    )
    for column in ("work", "sparkonce", "delta-spark", "ratio"):
        result.add_column(column)
    if args.part in ("all", "work"):
        spark = local_session(app_name="bench-vs-delta-spark")
        delta = DeltaSpark(args.delta_venv)
        work = Path(tempfile.mkdtemp(prefix="sparkonce-bench-vs-delta-"))
        try:
            rows = bench_work(spark, delta, work, args)
            trip = min(delta.round_trip() for _ in range(5))
            console.print(f"delta-spark on Spark {delta.version} vs sparkonce on PySpark {spark.version}")
            console.print(f"no-op round trip to the delta-spark worker (not counted): {trip * 1000:.1f} ms")
        finally:
            delta.close()
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
        for name, ours, theirs in rows:
            result.add_row(name, f"{ours:.2f}", f"{theirs:.2f}", f"{ours / theirs:.2f}x")
            if name.startswith("stream"):
                result.add_row(
                    f"  {name.split(':')[0]}, rows/s",
                    f"{args.rows / ours:,.0f}",
                    f"{args.rows / theirs:,.0f}",
                    f"{theirs / ours:.2f}x rows/s",
                )
    if args.part in ("all", "start"):
        ours, theirs = bench_start(args.delta_venv, args.repeat)
        result.add_row(
            "session start, fresh process to first query", f"{ours:.2f}", f"{theirs:.2f}", f"{ours / theirs:.2f}x"
        )
    console.print(result)


if __name__ == "__main__":
    main()
