"""``sparkonce quickstart --storage s3``: the crash-and-verify story with every table on the embedded S3 store.

Its own broker and SeaweedFS in the work dir (started and stopped by the quickstart), a real SIGKILL of the
driver after raw's Delta commit of batch 0 and before ``commits/0``, a restart, and every table checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce_local.quickstart import run_quickstart

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.s3, pytest.mark.crash]


def test_quickstart_with_tables_on_s3_survives_a_sigkill_exactly_once(tmp_path: Path) -> None:
    work_dir = tmp_path / "quickstart"
    result = run_quickstart(work_dir, records=300, crash_at="after_delta_commit:0", storage="s3")
    assert result.tables_root == "s3://quickstart/tables"
    assert result.crashed and result.batch_planned_not_committed and result.restart_ok, result.log_tail
    assert result.exactly_once, result
    rows = {t.table: t.rows for t in result.tables}
    assert rows["raw"] == result.produced == 300
    assert rows["bronze"] + rows["quarantine"] == 300 and rows["quarantine"] >= result.malformed > 0
    assert not (work_dir / "tables").exists()  # nothing on the local disk but checkpoints
    assert not (work_dir / "storage" / "storage.pid").exists()  # the store was stopped
