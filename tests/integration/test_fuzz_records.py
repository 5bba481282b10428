"""A seeded sample of the fuzz corpus's Kafka record values (``tests/fuzz_corpus.py``): the good sensor reading
damaged by byte and JSON mutations, parsed in one Spark job as the bronze stage parses them. Every record lands in
bronze with the values it says or in quarantine with a reason (undeclared fields fail the batch with
``SchemaMismatchError`` under ``drift = "fail"``); none is lost, none crashes the job."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.fuzz_corpus import run_records

pytestmark = pytest.mark.spark


def test_malformed_record_values_are_parsed_or_quarantined(spark: SparkSession, tmp_path: Path) -> None:
    outcomes, bad = run_records(spark, 20261126, 300, tmp_path)
    assert not bad, "\n".join(bad[:20])
    assert outcomes["ok"] and outcomes["clear-error"] and sum(outcomes.values()) == 300, outcomes
