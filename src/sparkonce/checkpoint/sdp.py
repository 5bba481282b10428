"""Spark Declarative Pipelines' checkpoint generations: ``<storage>/_checkpoints/<target>/<flow>/<generation>``.

Runs on the driver. SDP keeps one checkpoint folder per flow under the pipeline spec's ``storage``, named by an integer
*generation*. A full refresh (``spark-pipelines run --full-refresh-all`` / ``--full-refresh NAME``) starts the
flow again from its sources' beginning in the next generation's folder, under a new query id, and leaves the older
folders in place; it does not truncate a sink. :func:`earlier_generations` finds those older folders so a sink can
tell "a full refresh of a flow that already wrote here" from a plain first start (``docs/sdp.md``).

Local paths only, on purpose: this runs in the Delta sink's commit (a Python worker, without the driver's JVM and so
without Hadoop's file systems); the sink refuses a non-local checkpoint it was not handed a query id for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkonce.checkpoint.files import parse_metadata, read_text

__all__ = ["CHECKPOINTS_FOLDER", "FlowGeneration", "earlier_generations", "flow_generation"]

CHECKPOINTS_FOLDER = "_checkpoints"
"""The folder under SDP's ``storage`` that holds every flow's checkpoints."""


@dataclass(frozen=True, order=True)
class FlowGeneration:
    """One checkpoint generation of an SDP flow."""

    generation: int
    checkpoint_dir: Path
    query_id: str | None
    """The query id in its ``metadata`` (None when the folder has none: it never started a batch)."""


def flow_generation(checkpoint_dir: Path) -> int | None:
    """The generation number when ``checkpoint_dir`` has SDP's layout, else None."""
    if not checkpoint_dir.name.isdigit() or len(checkpoint_dir.parents) < 3:
        return None
    if checkpoint_dir.parents[2].name != CHECKPOINTS_FOLDER:
        return None
    return int(checkpoint_dir.name)


def earlier_generations(checkpoint_dir: Path) -> list[FlowGeneration]:
    """The flow's checkpoint generations older than ``checkpoint_dir``'s, oldest first ([] outside SDP's layout).

    Raises:
        CheckpointError: an older generation's ``metadata`` exists but cannot be read (the message names it).
    """
    generation = flow_generation(checkpoint_dir)
    if generation is None or generation == 0:
        return []
    found = []
    for sibling in checkpoint_dir.parent.iterdir():
        if not (sibling.is_dir() and sibling.name.isdigit() and int(sibling.name) < generation):
            continue
        metadata = sibling / "metadata"
        query_id = parse_metadata(read_text(metadata), path=metadata).query_id if metadata.is_file() else None
        found.append(FlowGeneration(int(sibling.name), sibling, query_id))
    return sorted(found)
