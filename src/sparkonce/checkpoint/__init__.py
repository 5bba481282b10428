"""Spark streaming checkpoint files: readers for ``metadata``, ``offsets/``, ``commits/``, ``sources/`` and the
file sink's ``_spark_metadata`` log, a writer for ``metadata``/``offsets``/``commits`` in Spark's format, and the
running query's own reads (:func:`read_query_id`, :func:`read_offsets_text`)."""

from __future__ import annotations

from sparkonce.checkpoint.file_log import FileLog, FileLogBatch, FileLogProblem, read_file_log
from sparkonce.checkpoint.files import (
    CommitFile,
    OffsetSeqMetadata,
    OffsetsFile,
    SourceInitialOffsets,
    StreamMetadata,
    parse_commit,
    parse_metadata,
    parse_offsets,
    parse_source_initial_offsets,
)
from sparkonce.checkpoint.query import read_offsets_text, read_query_id
from sparkonce.checkpoint.reader import CheckpointState, FileProblem, TempFile, read_checkpoint
from sparkonce.checkpoint.writer import (
    format_commit,
    format_metadata,
    format_offsets,
    write_commit,
    write_metadata,
    write_offsets,
)

__all__ = [
    "CheckpointState",
    "CommitFile",
    "FileLog",
    "FileLogBatch",
    "FileLogProblem",
    "FileProblem",
    "OffsetSeqMetadata",
    "OffsetsFile",
    "SourceInitialOffsets",
    "StreamMetadata",
    "TempFile",
    "format_commit",
    "format_metadata",
    "format_offsets",
    "parse_commit",
    "parse_metadata",
    "parse_offsets",
    "parse_source_initial_offsets",
    "read_checkpoint",
    "read_file_log",
    "read_offsets_text",
    "read_query_id",
    "write_commit",
    "write_metadata",
    "write_offsets",
]
