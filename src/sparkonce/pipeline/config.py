"""The pipeline definition, in three modules: its model (:mod:`sparkonce.pipeline.model`: frozen dataclasses),
the TOML loader that builds it and names the key of every problem (:mod:`sparkonce.pipeline.loader`, whose
docstring shows the file format), and what a pipeline gives the Spark session (:mod:`sparkonce.pipeline.session`);
field lists are parsed by :mod:`sparkonce.pipeline.ddl`. This module gathers their public names.

Runs on the driver.
"""

from __future__ import annotations

from sparkonce.pipeline.loader import load_pipeline, parse_pipeline
from sparkonce.pipeline.model import (
    LINEAGE_COLUMNS,
    SOURCE,
    STAGE_ORDER,
    BronzeStage,
    DriftPolicy,
    MergeStage,
    OutputTable,
    PipelineConfig,
    PostgresStage,
    RawStage,
    SchemaField,
    SourceConfig,
    Stage,
    StageKind,
    StageName,
    TransformStage,
    Trigger,
)
from sparkonce.pipeline.session import use_catalog, use_storage

__all__ = [
    "LINEAGE_COLUMNS",
    "SOURCE",
    "STAGE_ORDER",
    "BronzeStage",
    "DriftPolicy",
    "MergeStage",
    "OutputTable",
    "PipelineConfig",
    "PostgresStage",
    "RawStage",
    "SchemaField",
    "SourceConfig",
    "Stage",
    "StageKind",
    "StageName",
    "TransformStage",
    "Trigger",
    "load_pipeline",
    "parse_pipeline",
    "use_catalog",
    "use_storage",
]
