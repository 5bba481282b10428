"""SDP checkpoint generations: ``<storage>/_checkpoints/<target>/<flow>/<n>``, found from the folders alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.checkpoint import write_metadata
from sparkonce.checkpoint.sdp import FlowGeneration, earlier_generations, flow_generation
from sparkonce.errors import CheckpointError


def test_generations_of_a_flow(tmp_path: Path) -> None:
    flow = tmp_path / "storage" / "_checkpoints" / "raw_events" / "kafka_to_raw"
    for generation, query_id in ((0, "q0"), (1, "q1"), (3, None)):
        (flow / str(generation)).mkdir(parents=True)
        if query_id:
            write_metadata(flow / str(generation), query_id)
    (flow / "notes").mkdir()
    assert flow_generation(flow / "3") == 3
    assert earlier_generations(flow / "0") == []
    assert earlier_generations(flow / "3") == [
        FlowGeneration(0, flow / "0", "q0"),
        FlowGeneration(1, flow / "1", "q1"),
    ]
    assert earlier_generations(flow / "1") == [FlowGeneration(0, flow / "0", "q0")]
    (flow / "0" / "metadata").write_text("{garbled")
    with pytest.raises(CheckpointError, match="metadata"):
        earlier_generations(flow / "1")


@pytest.mark.parametrize("path", ["ck/1", "storage/checkpoints/t/f/1", "storage/_checkpoints/t/f/latest"])
def test_other_layouts_are_not_generations(tmp_path: Path, path: str) -> None:
    (tmp_path / path).mkdir(parents=True)
    (tmp_path / path).with_name("0").mkdir(exist_ok=True)
    assert earlier_generations(tmp_path / path) == []
