"""The doctor's "next start" text: what restarting the query will do, in plain words.

Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.ops.doctor.delta import DeltaFacts

__all__ = ["next_start_text"]


def next_start_text(state: CheckpointState, delta: dict[str, DeltaFacts]) -> str:
    """What the next start will do, and whether it is safe: never while a table's committed data files are damaged."""
    text = _restart_text(state, delta)
    damaged = [(table, facts.damaged_files) for table, facts in delta.items() if facts.damaged_files]
    for table, count in damaged:
        text += (
            f" But {table} references {count} file(s) that are missing or of another size than its log records: "
            "its committed data is damaged, whatever the restart does: unsafe (see delta-missing-files, "
            "delta-file-size-mismatch)."
        )
    return text.strip()


def _restart_text(state: CheckpointState, delta: dict[str, DeltaFacts]) -> str:
    lp, lc, app = state.last_planned, state.last_committed, state.query_id
    if state.is_empty:
        text = "No batch has been planned yet: the next start plans batch 0 from the sources' starting offsets."
        if not state.metadata_present:
            text += " A new query id will be created."
        return text
    if lp is None:
        return (
            f"commits/ holds batches up to {lc} but offsets/ is empty: Spark cannot find the offsets to "
            "resume from and will fail to start, or start over: unsafe."
        )
    sentences: list[str] = []
    if lc is not None and lc >= lp:
        sentences.append(
            f"Batch {lp} is planned and committed: the next start plans batch {lp + 1} from the offsets "
            f"where batch {lp} ended."
        )
        for table, facts in delta.items():
            txn = facts.snapshot.txn_version(app) if app else None
            if txn is None:
                continue
            if txn > lp:
                sentences.append(
                    f"But {table} already holds txn({app}, {txn}): the sink will skip batches "
                    f"{lp + 1}-{txn} with their new data: data lost."
                )
            elif txn == lp:
                sentences.append(f"{table} holds txn({app}, {txn}): checkpoint and table agree{_safe(facts)}")
        return " ".join(sentences)
    sentences.append(f"Batch {lp} is planned but not committed: Spark will re-run it with the same offsets.")
    if lp == 0:
        sentences.append(
            "Its start offsets are the sources' initial offsets, which Spark does not checkpoint: sparkonce's "
            "sources derive them from the end in offsets/0, so the re-run reads what batch 0 planned, even if the "
            "input has grown since."
        )
    if lp > 0 and state.offset_ids[0] == lp:
        sentences.append(f"But offsets/{lp - 1} is missing, so Spark cannot find where it starts: it fails.")
    if lc is not None and lp - lc > 1:
        sentences.append(
            f"Batches {lc + 1}-{lp - 1} are planned but not committed either; Spark treats them as done and "
            "does not re-run them."
        )
    for table, facts in delta.items():
        txn = facts.snapshot.txn_version(app) if app else None
        if txn is None:
            sentences.append(
                f"{table} has no txn for query id {app}: the sink cannot tell whether batch {lp} was written."
            )
            continue
        at = f" at table version {facts.txn_table_version}" if facts.txn_table_version is not None else ""
        if txn >= lp:
            sentences.append(
                f"The table {table} already holds txn({app}, {txn}){at}, so the write will be skipped{_safe(facts)}"
            )
        else:
            sentences.append(
                f"The table {table} holds txn({app}, {txn}){at}, so batch {lp} will be written once{_safe(facts)}"
            )
            if lc is not None and txn < lp - 1:
                sentences.append(f"But batches {txn + 1}-{lp - 1} never reached {table}: data lost.")
    return " ".join(sentences)


def _safe(facts: DeltaFacts) -> str:
    """The end of a sentence about a restart: ``: safe.`` unless the table's data files are damaged."""
    return "." if facts.damaged_files else ": safe."
