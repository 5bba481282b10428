"""The embedded demo pipeline: sensor readings from the embedded broker through raw, bronze and gold.

Everything lives under one work directory (default ``.sparkonce/quickstart``): ``pipeline.toml``, ``tables/`` and
``checkpoints/``. Used by ``sparkonce quickstart``; the file it writes also works with ``sparkonce run``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from sparkonce_local.services.producer import DEFAULT_TOPIC

DEFAULT_WORK_DIR = Path(".sparkonce") / "quickstart"
PIPELINE_FILE = "pipeline.toml"


def quickstart_pipeline(
    bootstrap: str,
    *,
    topic: str = DEFAULT_TOPIC,
    max_offsets_per_trigger: int = 500,
    tables: str = "tables",
    storage_options: Mapping[str, str] | None = None,
    changes_stage: bool = False,
) -> str:
    """The TOML text of the demo pipeline (paths relative to the file).

    ``tables`` is the folder (or object-store URI, e.g. ``s3://quickstart/tables``) holding the four tables;
    ``storage_options`` become the file's ``[storage]`` table. ``changes_stage``: one more merge stage,
    ``gold_changes``, fed by gold's change data feed (``input_mode = "changes"``), which mirrors gold.
    """
    storage = "".join(f"{name} = {json.dumps(value)}\n" for name, value in (storage_options or {}).items())
    text = _QUICKSTART.format(
        bootstrap=bootstrap,
        topic=topic,
        max_offsets_per_trigger=max_offsets_per_trigger,
        tables=tables.rstrip("/"),
    )
    if changes_stage:
        text += _CHANGES_STAGE.format(tables=tables.rstrip("/"))
    return text + (f"\n[storage]\n{storage}" if storage else "")


_QUICKSTART = """# The sparkonce quickstart pipeline: Kafka -> raw -> bronze (+ quarantine) -> gold.
name = "quickstart"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
starting_offsets = "earliest"
max_offsets_per_trigger = {max_offsets_per_trigger}

[stages.raw]
table = "{tables}/raw"
checkpoint = "checkpoints/raw"
trigger = {{ availableNow = true }}

[stages.bronze]
table = "{tables}/bronze"
checkpoint = "checkpoints/bronze"
quarantine = "{tables}/quarantine"
schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"
required = ["device_id", "reading_time", "value"]
drift = "fail"
trigger = {{ availableNow = true }}

[stages.gold]
table = "{tables}/gold"
checkpoint = "checkpoints/gold"
keys = ["device_id"]
order_by = "reading_time"
merge = "latest"
trigger = {{ availableNow = true }}
"""

_CHANGES_STAGE = """
[stages.gold_changes]
kind = "merge"
input = "gold"
input_mode = "changes"
table = "{tables}/gold_changes"
checkpoint = "checkpoints/gold_changes"
keys = ["device_id"]
trigger = {{ availableNow = true }}
"""


def write_quickstart_pipeline(
    work_dir: Path,
    bootstrap: str,
    *,
    topic: str = DEFAULT_TOPIC,
    tables: str = "tables",
    storage_options: Mapping[str, str] | None = None,
    max_offsets_per_trigger: int = 500,
    changes_stage: bool = False,
) -> Path:
    """Write the demo pipeline file into ``work_dir`` and return its path (see :func:`quickstart_pipeline`)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / PIPELINE_FILE
    text = quickstart_pipeline(
        bootstrap,
        topic=topic,
        tables=tables,
        storage_options=storage_options,
        max_offsets_per_trigger=max_offsets_per_trigger,
        changes_stage=changes_stage,
    )
    path.write_text(text, encoding="utf-8")
    return path


__all__ = ["DEFAULT_WORK_DIR", "PIPELINE_FILE", "quickstart_pipeline", "write_quickstart_pipeline"]
