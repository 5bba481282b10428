"""The retention guard's side of the doctor: the query's registrations as a reader of the Delta tables it reads
(:mod:`sparkonce.delta.txn.readers`). Runs in the CLI process; no Spark.

* ``reader-expired`` (warning): the registration was not updated within the table's
  ``sparkonce.readerRetentionDuration``, so log cleanup and VACUUM no longer keep what the query needs;
* ``reader-versions-gone`` (error): a Delta commit the query reads next is gone already: it cannot resume from its
  checkpoint.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

from sparkonce.checkpoint.tables import RecordedTable
from sparkonce.delta.txn.readers import RETENTION_PROPERTY, reader_states
from sparkonce.errors import SparkonceError
from sparkonce.ops.findings import Finding
from sparkonce.storage import table_location

__all__ = ["reader_findings"]


def reader_findings(
    query_id: str | None,
    recorded: Iterable[RecordedTable],
    *,
    now_ms: int,
    storage_options: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Findings about ``query_id``'s registrations on the Delta sources recorded in its checkpoint. A source that
    cannot be read gives none here (the query's own restart says why)."""
    if query_id is None:
        return []
    findings: list[Finding] = []
    for table in recorded:
        if table.role != "source" or not table.is_delta:
            continue
        try:
            states, _ = reader_states(table_location(table.location, storage_options=storage_options), now_ms=now_ms)
        except (SparkonceError, OSError):
            continue
        for state in states:
            reader = state.reader
            if reader.query_id != query_id:
                continue
            facts = {
                "table": table.location,
                "table_version": reader.table_version,
                "updated_at_ms": reader.updated_at_ms,
                "expires_at_ms": state.expires_at_ms,
            }
            if state.status == "versions-gone":
                findings.append(
                    Finding(
                        "reader-versions-gone",
                        "error",
                        f"the query reads {table.location} from table version {reader.table_version} on, but the "
                        f"Delta commit of table version {state.missing_version} is gone (log cleanup ran past it): "
                        "the query cannot resume from its checkpoint",
                        "restore the removed _delta_log files from a backup, or start the query afresh with a new "
                        "checkpoint (startingVersion); then drop the old registration: sparkonce readers "
                        f"{table.location} --forget {reader.query_id} --yes",
                        path=table.location,
                        details={**facts, "missing_version": state.missing_version},
                    )
                )
            elif state.status == "expired":
                when = dt.datetime.fromtimestamp(reader.updated_at_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
                findings.append(
                    Finding(
                        "reader-expired",
                        "warning",
                        f"the query's registration as a reader of {table.location} (from table version "
                        f"{reader.table_version}) was last updated {when}, longer ago than the table's "
                        f"{RETENTION_PROPERTY}: log cleanup and VACUUM no longer keep what it needs",
                        f"restart the query soon (it registers again), or raise the table's {RETENTION_PROPERTY}",
                        path=table.location,
                        details=facts,
                    )
                )
    return findings
