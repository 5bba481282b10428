"""The quick-start class archive (``sparkonce.class_archive``): built once by ``sparkonce jars archive`` from a new
process, mapped by every quick-start driver of the same Java and classpath, and left out, with the driver still
starting, where the JVM finds that it does not match."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.class_archive import build_class_archive
from sparkonce.errors import JarsError
from sparkonce.spark import CLASS_ARCHIVES_ENV, quick_start_archive

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]

_DRIVER = """
import json, sys
from sparkonce.spark import local_session
spark = local_session(app_name="class-archive-test", jvm="quick-start", extra_conf=json.loads(sys.argv[1]))
bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({"java_options": list(bean.getInputArguments()), "rows": spark.range(5).count()}))
"""


def _driver(env: dict[str, str], extra_conf: dict[str, str]) -> dict[str, Any]:
    """A quick-start driver in a new process: its JVM's options and a job's answer."""
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(extra_conf)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _archive_options(java_options: list[str]) -> list[str]:
    return [o for o in java_options if o.startswith("-XX:SharedArchiveFile=")]


def test_built_once_then_mapped_by_quick_start_drivers_and_skipped_where_it_does_not_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLASS_ARCHIVES_ENV, str(tmp_path / "archives"))
    env = dict(os.environ)
    command = [sys.executable, "-m", "sparkonce.cli.main", "jars", "archive", "--json"]
    built = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    first = json.loads(built.stdout[built.stdout.index("{") :])
    archive = Path(first["path"])
    assert first["built"] is True and archive.parent == tmp_path / "archives"
    assert archive.is_file() and archive.stat().st_size == first["size_bytes"] > 10_000_000
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no temporary file left beside it

    again = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert json.loads(again.stdout[again.stdout.index("{") :]) == {**first, "built": False}

    # Mapped: with -Xshare:on a JVM that cannot map its archives refuses to start.
    mapped = _driver(env, {"spark.driver.extraJavaOptions": "-Xshare:on"})
    assert _archive_options(mapped["java_options"]) == [f"-XX:SharedArchiveFile={archive}"]
    assert mapped["rows"] == 5

    # Another classpath has its own archive name; none is built for it, so none is given.
    extra = tmp_path / "extra-classes"
    extra.mkdir()
    other = _driver(env, {"spark.driver.extraClassPath": str(extra)})
    assert _archive_options(other["java_options"]) == [] and other["rows"] == 5

    # An archive of another classpath under its name: the JVM checks it against its own and starts without it.
    misplaced = quick_start_archive(extra_class_path=str(extra))
    assert misplaced != archive
    shutil.copyfile(archive, misplaced)
    checked = _driver(env, {"spark.driver.extraClassPath": str(extra)})
    assert _archive_options(checked["java_options"]) == [f"-XX:SharedArchiveFile={misplaced}"]
    assert checked["rows"] == 5


def test_refused_in_a_process_whose_driver_runs_already(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLASS_ARCHIVES_ENV, str(tmp_path))
    with pytest.raises(JarsError, match=r"class archive .*already runs a Spark driver.*sparkonce jars archive"):
        build_class_archive(force=True)
    assert list(tmp_path.iterdir()) == []
