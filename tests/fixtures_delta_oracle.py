"""The delta-spark oracle for integration tests (marker ``oracle``): Delta Lake's own JVM connector beside sparkonce.

Registered in ``tests/conftest.py`` through ``pytest_plugins``. delta-spark does not run on sparkonce's PySpark 4.3,
so it runs in a second virtualenv (``.venv-delta``: PySpark 4.2, delta-spark and the jars Maven resolves from
``tests/oracle/pom.xml``; ``scripts/setup_delta_oracle.sh`` makes it, the fixture runs that script first, instant
once stamped). The ``delta_oracle`` fixture starts ``tests/oracle/runner.py`` there once per test session (one JVM
per pytest-xdist worker) and sends it requests; runs in the test process (driver side).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from tests.oracle.runner import to_json_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPO = Path(__file__).resolve().parent.parent
ORACLE_VENV = REPO / ".venv-delta"
# A request may run a MERGE or an OPTIMIZE on the shared 2-core machine; the first starts the JVM.
REQUEST_TIMEOUT_S = 300.0
# DESCRIBE DETAIL's columns that say what a table is (the others are its id, times and file layout).
DETAIL_COLUMNS = (
    "format",
    "partitionColumns",
    "clusteringColumns",
    "properties",
    "minReaderVersion",
    "minWriterVersion",
    "tableFeatures",
)


class OracleError(Exception):
    """The oracle refused a request (its message is Delta's) or stopped answering."""


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in one order whatever order an engine returned them in."""
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def spark_rows(frame: DataFrame) -> list[dict[str, Any]]:
    """A sparkonce DataFrame's rows as the oracle returns its own (plain JSON values), sorted."""
    return sorted_rows([to_json_value(row) for row in frame.collect()])


def table_ref(path: Path | str) -> str:
    """``delta.`path``` for a statement on either engine."""
    return f"delta.`{path}`"


@dataclass
class DeltaOracle:
    """A running oracle process: one request at a time, answered by delta-spark's JVM (test process side)."""

    process: subprocess.Popen[str]
    log: Path
    spark_version: str = ""

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and wait for its answer; an ``OracleError`` carries Delta's message."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps({"op": op, **args}) + "\n")
        stdin.flush()
        answer = self._answer(stdout)
        if not answer["ok"]:
            raise OracleError(answer["error"])
        return answer["result"]

    def _answer(self, stdout: IO[str]) -> dict[str, Any]:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = stdout.readline()
                if not line:
                    raise OracleError(f"the oracle exited ({self.process.poll()}); its log: {self._tail()}")
                return dict(json.loads(line))
            if time.monotonic() >= deadline:
                raise OracleError(f"no answer in {REQUEST_TIMEOUT_S:.0f} s; its log: {self._tail()}")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else "(none)"

    def sql(
        self, statement: str, *, conf: dict[str, str] | None = None, hold: Path | None = None
    ) -> list[dict[str, Any]]:
        """Run one statement on delta-spark; its result rows. With ``hold``, its Spark jobs wait until ``<hold>.go``
        exists and ``<hold>.waiting`` says one is waiting (``tests.oracle.runner.run_held``)."""
        held = {} if hold is None else {"hold": str(hold)}
        return list(self.request("sql", statement=statement, conf=conf or {}, **held)["rows"])

    def rows(self, path: Path | str, **options: str) -> list[dict[str, Any]]:
        """The rows delta-spark reads from the table at ``path`` (reader options as given), sorted."""
        return sorted_rows(self.request("read", path=str(path), options=options)["rows"])

    def history(self, path: Path | str) -> list[dict[str, Any]]:
        """DESCRIBE HISTORY as delta-spark answers it, oldest table version first."""
        return sorted(self.sql(f"DESCRIBE HISTORY {table_ref(path)}"), key=lambda row: int(row["version"]))

    def detail(self, path: Path | str) -> dict[str, Any]:
        """DESCRIBE DETAIL as delta-spark answers it, only :data:`DETAIL_COLUMNS`."""
        (row,) = self.sql(f"DESCRIBE DETAIL {table_ref(path)}")
        return {column: row[column] for column in DETAIL_COLUMNS}

    def changes(self, path: Path | str, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """The change data feed (batch ``readChangeFeed``) from table version ``start`` (to ``end``), sorted."""
        options = {"readChangeFeed": "true", "startingVersion": str(start)}
        if end is not None:
            options["endingVersion"] = str(end)
        return self.rows(path, **options)

    def append(self, path: Path | str, rows: list[dict[str, Any]], schema: str, **options: str) -> None:
        """Append ``rows`` (of the DDL ``schema``) with delta-spark's writer and its options (``txnAppId``...)."""
        self.request("append", path=str(path), rows=rows, schema=schema, options=options)

    def stream(
        self,
        path: Path | str,
        target: Path | str,
        checkpoint: Path | str,
        *,
        sink_options: dict[str, str] | None = None,
        **options: str,
    ) -> int:
        """Stream (``availableNow``) the Delta table at ``path`` (reader ``options``) into ``target`` (writer
        ``sink_options``) with delta-spark; rows read."""
        return int(
            self.request(
                "stream",
                path=str(path),
                target=str(target),
                checkpoint=str(checkpoint),
                options=options,
                sink_options=sink_options or {},
            )
        )

    def fan_out(
        self,
        source: Path | str,
        targets: list[Path],
        checkpoint: Path | str,
        *,
        app_id: str,
        fail_flag: Path | None = None,
    ) -> str | None:
        """The articles' ``foreachBatch`` into ``targets`` with ``txnAppId``/``txnVersion``, run by delta-spark
        (``tests.oracle.runner.run_fan_out``); the query's error text, None when it ended normally."""
        answer = self.request(
            "fan_out",
            source=str(source),
            targets=[str(t) for t in targets],
            checkpoint=str(checkpoint),
            app_id=app_id,
            fail_flag=None if fail_flag is None else str(fail_flag),
        )
        return None if answer is None else str(answer)

    def history_sql(self, path: Path | str, statement: str) -> list[dict[str, Any]]:
        """``statement`` over the view ``oracle_history`` of delta-spark's ``DeltaTable.forPath(path).history()``."""
        return list(self.request("history_sql", path=str(path), statement=statement)["rows"])

    def replay(self, source: Path | str, options: dict[str, str], select: list[str], target: Path | str) -> None:
        """The articles' time-travel replay run by delta-spark (``tests.oracle.runner.replay``)."""
        self.request("replay", source=str(source), options=options, select=select, target=str(target))


def sparkonce_history(spark: SparkSession, path: Path | str) -> list[dict[str, Any]]:
    """DESCRIBE HISTORY as sparkonce answers it, oldest table version first, as JSON values."""
    rows = [to_json_value(row) for row in spark.sql(f"DESCRIBE HISTORY {table_ref(path)}").collect()]
    return sorted(rows, key=lambda row: int(row["version"]))


def sparkonce_detail(spark: SparkSession, path: Path | str) -> dict[str, Any]:
    """DESCRIBE DETAIL as sparkonce answers it, only :data:`DETAIL_COLUMNS`."""
    (row,) = [to_json_value(row) for row in spark.sql(f"DESCRIBE DETAIL {table_ref(path)}").collect()]
    return {column: row[column] for column in DETAIL_COLUMNS}


def start_oracle(work: Path) -> DeltaOracle:
    """Install the oracle if needed, start its runner and wait for its session (test process)."""
    subprocess.run(["bash", str(REPO / "scripts" / "setup_delta_oracle.sh")], check=True)
    from sparkonce.spark import QUICK_START_JAVA_OPTIONS

    log = work / "oracle.log"
    env = {
        **os.environ,
        "SPARKONCE_ORACLE_JARS": str(ORACLE_VENV / "jars"),
        "SPARKONCE_ORACLE_WAREHOUSE": str(work / "warehouse"),
        "SPARKONCE_ORACLE_JAVA_OPTIONS": QUICK_START_JAVA_OPTIONS,
        "PYSPARK_PYTHON": str(ORACLE_VENV / "bin" / "python"),
        "PYSPARK_DRIVER_PYTHON": str(ORACLE_VENV / "bin" / "python"),
        "TZ": "UTC",
    }
    for name in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS"):
        env.pop(name, None)
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [str(ORACLE_VENV / "bin" / "python"), str(REPO / "tests" / "oracle" / "runner.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            env=env,
            cwd=work,
        )
    oracle = DeltaOracle(process, log)
    assert process.stdout is not None
    started = oracle._answer(process.stdout)
    if not started["ok"]:
        raise OracleError(str(started))
    oracle.spark_version = started["result"]["spark"]
    return oracle


@pytest.fixture(scope="session")
def delta_oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeltaOracle]:
    """delta-spark's JVM for the whole session (one per pytest-xdist worker)."""
    oracle = start_oracle(tmp_path_factory.mktemp("delta-oracle"))
    try:
        yield oracle
    finally:
        assert oracle.process.stdin is not None
        oracle.process.stdin.close()
        try:
            oracle.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            oracle.process.kill()
            oracle.process.wait()
