"""Parsers for the single files of a Spark streaming checkpoint, in Spark's exact formats.

Formats (Spark's ``HDFSMetadataLog`` family, checked against Spark 4 sources and real files):

* ``metadata``: ``{"id":"<query uuid>"}`` (``StreamMetadata``), no trailing newline.
* ``offsets/N`` (``OffsetSeqLog``): ``v1``, a newline, the ``OffsetSeqMetadata`` JSON (may be empty), then one
  line per source holding that source's offset JSON or ``-`` for none. Format ``v2`` (``OffsetMap``) writes
  ``<sourceId>:<offset JSON>`` per line instead.
* ``commits/N`` (``CommitLog``): ``v1`` or ``v2``, a newline, the ``CommitMetadata`` JSON
  (``nextBatchWatermarkMs``, and ``stateUniqueIds`` for checkpoint format 2); a missing JSON line means
  ``{}``.
* ``sources/<i>/0`` of the Kafka source: one leading byte (``0x00``; the Spark 2.1.0 files start with another
  byte), then ``v1`` + newline + the offset JSON, or (2.1.0) the JSON alone.

Everything here is pure Python and runs on the driver or in the CLI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkonce.errors import CheckpointError

__all__ = [
    "OFFSETS_MAX_VERSION",
    "COMMITS_MAX_VERSION",
    "CommitFile",
    "OffsetSeqMetadata",
    "OffsetsFile",
    "SourceInitialOffsets",
    "StreamMetadata",
    "parse_commit",
    "parse_log_version",
    "parse_metadata",
    "parse_offsets",
    "parse_source_initial_offsets",
    "read_text",
]

OFFSETS_MAX_VERSION = 2
COMMITS_MAX_VERSION = 2
VOID_OFFSET = "-"
_METADATA_KEYS = ("batchWatermarkMs", "batchTimestampMs", "conf")


@dataclass(frozen=True)
class StreamMetadata:
    """The checkpoint's ``metadata`` file: the query id, which a Delta sink uses as the txn ``app_id``."""

    query_id: str
    extra: dict[str, Any]
    raw: str
    path: str | Path | None = None


@dataclass(frozen=True)
class OffsetSeqMetadata:
    """The metadata line of ``offsets/N`` (Spark's ``OffsetSeqMetadata`` / ``OffsetSeqMetadataV2``)."""

    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    """Other keys, e.g. ``sourceMetadataInfo`` and ``controlBatchInfo`` of format v2."""


@dataclass(frozen=True)
class OffsetsFile:
    """One ``offsets/N`` file: the end offsets Spark planned for batch ``batch_id``.

    ``sources`` maps a source id (``"0"``, ``"1"``, ... in source order for format v1, the recorded ids
    for v2)
    to the offset text (usually JSON), or ``None`` for a source without an offset (``-``).
    """

    batch_id: int
    log_version: int
    metadata: OffsetSeqMetadata | None
    sources: dict[str, str | None]
    raw: str
    path: str | Path | None = None

    def source_offset(self, source_id: str) -> Any:
        """Return one source's offset parsed as JSON (a plain string when it is not JSON, ``None`` for
        ``-``)."""
        text = self.sources.get(source_id)
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text


@dataclass(frozen=True)
class CommitFile:
    """One ``commits/N`` file: batch ``batch_id`` completed (a *checkpoint commit*)."""

    batch_id: int
    log_version: int
    next_batch_watermark_ms: int | None
    state_unique_ids: dict[str, Any] | None
    extra: dict[str, Any]
    raw: str
    path: str | Path | None = None


@dataclass(frozen=True)
class SourceInitialOffsets:
    """A source's own initial-offsets file (Kafka: ``sources/<i>/0``)."""

    leading_byte: int | None
    """The byte Spark writes before the content (0x00; Spark 2.1.0 files hold another byte), if any."""
    log_version: int | None
    """``1`` for ``v1``; ``None`` for the Spark 2.1.0 form without a version line."""
    offset_text: str
    raw: bytes
    path: str | Path | None = None

    @property
    def offsets(self) -> Any:
        """The offset parsed as JSON (e.g. ``{"topic": {"0": 42}}``), or the plain text when it is not
        JSON."""
        try:
            return json.loads(self.offset_text)
        except json.JSONDecodeError:
            return self.offset_text.strip()


def _where(path: str | Path | None) -> str:
    return str(path) if path is not None else "<text>"


def read_text(path: Path) -> str:
    """Read a checkpoint file as UTF-8.

    Raises:
        CheckpointError: The file cannot be read or is not UTF-8.
    """
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err.strerror or err}") from err


def parse_log_version(line: str, max_version: int, *, path: str | Path | None = None) -> int:
    """Parse a ``vN`` version line as Spark's ``MetadataVersionUtil.validateVersion`` does.

    Raises:
        CheckpointError: The line is not ``v<positive int>``, or the version is newer than ``max_version``
            (written by a newer Spark).
    """
    text = line.strip()
    if len(text) > 1 and text[0] == "v":
        try:
            version = int(text[1:])
        except ValueError:
            version = 0
        if version > max_version:
            raise CheckpointError(
                f"{_where(path)}: log version v{version} is newer than the v{max_version} this reader "
                "supports (written by a newer Spark; upgrade)"
            )
        if version > 0:
            return version
    raise CheckpointError(f"{_where(path)}: malformed log file: expected a version line like 'v1', got {text!r}")


def _json_object(text: str, what: str, path: str | Path | None) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckpointError(
            f"{_where(path)}: {what} is not valid JSON ({err.msg} at char {err.pos}): {text[:80]!r}"
        ) from err
    if not isinstance(value, dict):
        raise CheckpointError(f"{_where(path)}: {what} is not a JSON object: {text[:80]!r}")
    return value


def _int_field(data: dict[str, Any], key: str, what: str, path: str | Path | None) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{_where(path)}: {what} field {key!r} is not an integer: {value!r}")
    return value


def parse_metadata(text: str, *, path: str | Path | None = None) -> StreamMetadata:
    """Parse the checkpoint ``metadata`` file.

    Raises:
        CheckpointError: Not a JSON object with a string ``id``.
    """
    data = _json_object(text.strip(), "metadata", path)
    query_id = data.get("id")
    if not isinstance(query_id, str) or not query_id:
        raise CheckpointError(f"{_where(path)}: metadata has no query 'id'")
    return StreamMetadata(query_id, {k: v for k, v in data.items() if k != "id"}, text, path)


def parse_offsets(text: str, batch_id: int, *, path: str | Path | None = None) -> OffsetsFile:
    """Parse ``offsets/N`` (format v1 or v2).

    Raises:
        CheckpointError: Empty or truncated file, unknown version, bad metadata JSON, bad v2 line.
    """
    if not text:
        raise CheckpointError(f"{_where(path)}: empty offsets file (incomplete log file)")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines = lines[:-1]
    version = parse_log_version(lines[0], OFFSETS_MAX_VERSION, path=path)
    if len(lines) < 2:
        raise CheckpointError(f"{_where(path)}: truncated offsets file: no metadata line after {lines[0]!r}")
    metadata: OffsetSeqMetadata | None = None
    if lines[1].strip():
        data = _json_object(lines[1].strip(), "offset metadata", path)
        conf = data.get("conf") or {}
        if not isinstance(conf, dict):
            raise CheckpointError(f"{_where(path)}: offset metadata field 'conf' is not a JSON object: {conf!r}")
        metadata = OffsetSeqMetadata(
            batch_watermark_ms=_int_field(data, "batchWatermarkMs", "offset metadata", path) or 0,
            batch_timestamp_ms=_int_field(data, "batchTimestampMs", "offset metadata", path) or 0,
            conf={str(k): str(v) for k, v in conf.items()},
            extra={k: v for k, v in data.items() if k not in _METADATA_KEYS},
        )
    sources: dict[str, str | None] = {}
    for index, line in enumerate(lines[2:]):
        if version == 2:
            source_id, sep, offset = line.partition(":")
            if not sep:
                raise CheckpointError(f"{_where(path)}: v2 offsets line {index + 3} is not 'sourceId:offset'")
        else:
            source_id, offset = str(index), line
        sources[source_id] = None if offset == VOID_OFFSET else offset
    return OffsetsFile(batch_id, version, metadata, sources, text, path)


def parse_commit(text: str, batch_id: int, *, path: str | Path | None = None) -> CommitFile:
    """Parse ``commits/N``; a file with only the version line means ``{}`` (Spark 2.3.1-style).

    Raises:
        CheckpointError: Empty file, unknown version or bad JSON.
    """
    if not text:
        raise CheckpointError(f"{_where(path)}: empty commit file (incomplete log file)")
    lines = text.split("\n")
    version = parse_log_version(lines[0], COMMITS_MAX_VERSION, path=path)
    body = lines[1].strip() if len(lines) > 1 and lines[1].strip() else "{}"
    data = _json_object(body, "commit metadata", path)
    state_ids = data.get("stateUniqueIds")
    return CommitFile(
        batch_id=batch_id,
        log_version=version,
        next_batch_watermark_ms=_int_field(data, "nextBatchWatermarkMs", "commit metadata", path),
        state_unique_ids=state_ids if isinstance(state_ids, dict) else None,
        extra={k: v for k, v in data.items() if k not in ("nextBatchWatermarkMs", "stateUniqueIds")},
        raw=text,
        path=path,
    )


def parse_source_initial_offsets(raw: bytes, *, path: str | Path | None = None) -> SourceInitialOffsets:
    """Parse a source's initial-offsets file such as Kafka's ``sources/<i>/0``.

    Spark skips one leading byte (written as 0x00 for SPARK-19517). After it comes either ``v1`` +
    newline + the
    offset, or (Spark 2.1.0) the offset alone. Files without a leading byte (other sources: ``v1\\n<offset>``)
    are accepted too.

    Raises:
        CheckpointError: Empty, not UTF-8, unsupported version (newer Spark), or no version line.
    """
    if not raw:
        raise CheckpointError(f"{_where(path)}: empty source offsets file")
    leading: int | None = None
    body = raw
    if raw[:1] not in (b"v", b"{"):
        leading, body = raw[0], raw[1:]
    try:
        content = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{_where(path)}: not UTF-8 after the leading byte ({err.reason})") from err
    if not content:
        raise CheckpointError(f"{_where(path)}: source offsets file holds only a leading byte")
    if content[0] == "v":
        newline = content.find("\n")
        if newline <= 0:
            raise CheckpointError(f"{_where(path)}: malformed log file: no newline after the version line")
        version = parse_log_version(content[:newline], 1, path=path)
        return SourceInitialOffsets(leading, version, content[newline + 1 :], raw, path)
    return SourceInitialOffsets(leading, None, content, raw, path)
