"""The embedded demo pipeline: sensor readings from the embedded broker through raw, bronze and gold.

Everything lives under one work directory (default ``.sparkonce/quickstart``): ``pipeline.toml``, ``tables/`` and
``checkpoints/``. Used by ``sparkonce quickstart``; the file it writes also works with ``sparkonce run``.
"""

from __future__ import annotations

from pathlib import Path

from sparkonce.services.producer import DEFAULT_TOPIC

DEFAULT_WORK_DIR = Path(".sparkonce") / "quickstart"
PIPELINE_FILE = "pipeline.toml"


def quickstart_pipeline(bootstrap: str, *, topic: str = DEFAULT_TOPIC, max_offsets_per_trigger: int = 500) -> str:
    """The TOML text of the demo pipeline (paths relative to the file)."""
    return f'''# The sparkonce quickstart pipeline: Kafka -> raw -> bronze (+ quarantine) -> gold.
name = "quickstart"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
starting_offsets = "earliest"
max_offsets_per_trigger = {max_offsets_per_trigger}

[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
trigger = {{ availableNow = true }}

[stages.bronze]
table = "tables/bronze"
checkpoint = "checkpoints/bronze"
quarantine = "tables/quarantine"
schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"
required = ["device_id", "reading_time", "value"]
drift = "fail"
trigger = {{ availableNow = true }}

[stages.gold]
table = "tables/gold"
checkpoint = "checkpoints/gold"
keys = ["device_id"]
order_by = "reading_time"
merge = "latest"
trigger = {{ availableNow = true }}
'''


def write_quickstart_pipeline(work_dir: Path, bootstrap: str, *, topic: str = DEFAULT_TOPIC) -> Path:
    """Write the demo pipeline file into ``work_dir`` and return its path."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / PIPELINE_FILE
    path.write_text(quickstart_pipeline(bootstrap, topic=topic), encoding="utf-8")
    return path


__all__ = ["DEFAULT_WORK_DIR", "PIPELINE_FILE", "quickstart_pipeline", "write_quickstart_pipeline"]
