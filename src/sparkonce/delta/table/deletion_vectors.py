"""Deletion vectors: which rows of a data file a Delta table has deleted without rewriting the file.

An ``add`` action may carry a ``deletionVector`` descriptor (PROTOCOL.md, "Deletion Vectors"):

* ``storageType`` ``u``: ``pathOrInlineDv`` is ``<random prefix><20 Z85 characters of a UUID>``; the bitmap is in
  ``<table>/<prefix>/deletion_vector_<uuid>.bin`` at byte ``offset``;
* ``p``: ``pathOrInlineDv`` is the absolute URI of that file;
* ``i``: ``pathOrInlineDv`` is the bitmap itself, Z85-encoded (``sizeInBytes`` bytes once decoded).

A DV file starts with a format version byte (1); at ``offset`` each bitmap is framed as a big-endian int32 size
(must equal ``sizeInBytes``), the serialized bitmap, and a big-endian CRC32 of it. The bitmap is a
``RoaringBitmapArray``: a little-endian int32 magic number, then either the portable 64-bit Roaring format
(magic 1681511377: uint64 count, then per bitmap a uint32 key = the high 32 bits and a standard 32-bit Roaring
bitmap) or Delta's older native format (magic 1681511376: int32 count, then per bitmap an int32 size and a
standard 32-bit Roaring bitmap, the key being its index). The set holds the 0-based row indexes, in file order,
of the deleted rows.

Descriptors are resolved on the driver (:meth:`DeletionVector.from_action`); bitmaps are loaded on executors
(:func:`deleted_rows`), next to the data file they apply to.

Write side (DELETE, UPDATE and MERGE on a table whose protocol has ``deletionVectors`` and whose
``delta.enableDeletionVectors`` is true, :func:`deletion_vectors_writable`): executors serialize each file's set of
deleted rows in the portable format (:func:`serialize_bitmap_array`) and pack the bitmaps of one task into one new
``deletion_vector_<uuid>.bin`` file (:class:`DeletionVectorFile`), as Delta's ``DeletionVectorWriter`` does; the
driver commits the descriptors they return.
"""

from __future__ import annotations

import os
import random
import string
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

import numpy as np

from sparkonce.delta.table.properties import enabled, property_value
from sparkonce.errors import DeltaLogError, UnsupportedFeatureError
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from pyroaring import BitMap64

StorageType = Literal["u", "p", "i"]

PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
FILE_FORMAT_VERSION = 1
"""The first byte of a deletion vector file (Delta's ``DV_FILE_FORMAT_VERSION_ID_V1``)."""
ENABLE_PROPERTY = "delta.enableDeletionVectors"
_Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85_CHARS)}


@dataclass(frozen=True)
class DeletionVector:
    """A resolved deletion vector descriptor: plain data built on the driver, loaded on executors."""

    storage_type: StorageType
    file: str | None
    """Path of the DV file (``u`` and ``p``) inside ``store``'s file system (absolute local path for local
    tables); None for inline bitmaps."""
    inline: str | None
    """The Z85 text of an inline bitmap (``i``)."""
    offset: int
    size_in_bytes: int
    cardinality: int
    """How many rows it deletes (from the log; checked against the bitmap)."""
    store: TableLocation | None = None
    """The table whose file system holds ``file`` when the table is on an object store (None: local file)."""

    @classmethod
    def from_action(
        cls, descriptor: Mapping[str, Any], table_root: str | TableLocation, *, data_file: str
    ) -> DeletionVector:
        """Resolve an ``add`` action's ``deletionVector`` against the table root.

        Raises:
            DeltaLogError: the descriptor is malformed.
            UnsupportedFeatureError: a ``p`` DV that is not on the local file system.
        """
        location = table_root if isinstance(table_root, TableLocation) else table_location(table_root)
        storage = descriptor.get("storageType")
        raw = str(descriptor.get("pathOrInlineDv") or "")
        try:
            size = int(descriptor["sizeInBytes"])
            cardinality = int(descriptor.get("cardinality") or 0)
            offset = int(descriptor.get("offset") or 0)
        except (KeyError, TypeError, ValueError):
            raise DeltaLogError(f"the deletion vector of {data_file} is malformed: {descriptor!r}") from None
        if storage == "i":
            return cls("i", None, raw, 0, size, cardinality)
        if storage == "u":
            relative = dv_relative_path(descriptor)
            if relative is None:
                raise DeltaLogError(f"the deletion vector of {data_file} has a malformed UUID path {raw!r}")
            if not location.is_local:
                return cls("u", location.fs_path(relative), None, offset, size, cardinality, location)
            return cls("u", os.path.join(location.uri, relative), None, offset, size, cardinality)
        if storage == "p":
            parsed = urlparse(raw)
            if parsed.scheme not in ("", "file"):
                raise UnsupportedFeatureError(
                    f"the deletion vector of {data_file} is at {raw}, which is not on the local file system"
                )
            return cls("p", unquote(parsed.path), None, offset, size, cardinality)
        raise DeltaLogError(f"the deletion vector of {data_file} has an unknown storageType {storage!r}")

    def describe(self) -> str:
        return "an inline deletion vector" if self.file is None else f"deletion vector {self.file} @ {self.offset}"


def z85_decode(text: str, length: int) -> bytes:
    """Decode Z85 text (Delta's Base85 codec) and keep the first ``length`` bytes (the rest is padding).

    Raises:
        ValueError: the text is not Z85.
    """
    if len(text) % 5:
        raise ValueError(f"Z85 text of {len(text)} characters is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        number = 0
        for char in text[i : i + 5]:
            number = number * 85 + _Z85_INDEX[char]
        out += number.to_bytes(4, "big")
    return bytes(out[:length])


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data`` (Delta's Base85 codec), zero-padded to a multiple of 4 bytes first."""
    padded = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(padded), 4):
        number = int.from_bytes(padded[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            number, digit = divmod(number, 85)
            chunk.append(_Z85_CHARS[digit])
        out.append("".join(reversed(chunk)))
    return "".join(out)


def serialized_bitmap(dv: DeletionVector) -> bytes:
    """The serialized ``RoaringBitmapArray`` of ``dv``, its file framing and checksum checked. Runs on executors.

    Raises:
        DeltaLogError: the DV file is missing, or its size or checksum does not match the descriptor.
    """
    if dv.file is None:
        assert dv.inline is not None
        try:
            return z85_decode(dv.inline, dv.size_in_bytes)
        except (KeyError, ValueError) as err:
            raise DeltaLogError(f"an inline deletion vector is not valid Z85: {err}") from None
    try:
        if dv.store is not None:
            with dv.store.filesystem().open_input_file(dv.file) as stream:
                stream.seek(dv.offset)
                framed = bytes(stream.read(4 + dv.size_in_bytes + 4))
        else:
            with open(dv.file, "rb") as handle:
                handle.seek(dv.offset)
                framed = handle.read(4 + dv.size_in_bytes + 4)
    except FileNotFoundError:
        raise DeltaLogError(f"deletion vector file {dv.file} is missing (needed to read the table)") from None
    except OSError as err:
        raise DeltaLogError(f"cannot read deletion vector file {dv.file}: {err}") from None
    if len(framed) < 8 + dv.size_in_bytes:
        raise DeltaLogError(f"{dv.describe()} is truncated: {len(framed)} bytes, expected {dv.size_in_bytes + 8}")
    (size,) = struct.unpack(">i", framed[:4])
    if size != dv.size_in_bytes:
        raise DeltaLogError(f"{dv.describe()} holds {size} bytes, the log says {dv.size_in_bytes}")
    data = framed[4 : 4 + size]
    (checksum,) = struct.unpack(">I", framed[4 + size : 8 + size])
    if zlib.crc32(data) != checksum:
        raise DeltaLogError(f"{dv.describe()} fails its CRC32 checksum")
    return data


def parse_bitmap_array(data: bytes, *, what: str = "deletion vector") -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The sorted row indexes of a serialized ``RoaringBitmapArray`` (portable or native format).

    Raises:
        DeltaLogError: unknown magic number or a corrupt bitmap.
    """
    from pyroaring import BitMap, BitMap64

    if len(data) < 4:
        raise DeltaLogError(f"{what} is {len(data)} bytes long, too short for a RoaringBitmapArray")
    (magic,) = struct.unpack("<i", data[:4])
    try:
        if magic == PORTABLE_MAGIC:
            rows = BitMap64.deserialize(data[4:])
            return np.fromiter(rows, dtype=np.uint64, count=len(rows))
        if magic == NATIVE_MAGIC:
            (count,) = struct.unpack("<i", data[4:8])
            position = 8
            parts: list[np.ndarray[Any, np.dtype[np.uint64]]] = []
            for key in range(count):
                (size,) = struct.unpack("<i", data[position : position + 4])
                bitmap = BitMap.deserialize(data[position + 4 : position + 4 + size])
                low = np.fromiter(bitmap, dtype=np.uint64, count=len(bitmap))
                parts.append(low + np.uint64(key << 32))
                position += 4 + size
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    except (ValueError, OverflowError, struct.error) as err:
        raise DeltaLogError(f"{what} is not a valid RoaringBitmapArray: {err}") from None
    raise DeltaLogError(f"{what} has an unknown RoaringBitmapArray magic number {magic}")


def deleted_rows(dv: DeletionVector) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """Load the deleted row indexes of ``dv``, checked against its cardinality. Runs on executors.

    Raises:
        DeltaLogError: the DV cannot be read or does not match its descriptor.
    """
    rows = parse_bitmap_array(serialized_bitmap(dv), what=dv.describe())
    if dv.cardinality and len(rows) != dv.cardinality:
        raise DeltaLogError(f"{dv.describe()} deletes {len(rows)} rows, the log says {dv.cardinality}")
    return rows


def keep_mask(dv: DeletionVector, num_rows: int, *, data_file: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """A boolean mask over the ``num_rows`` rows of a data file: False where ``dv`` deletes the row. Runs on executors.

    Raises:
        DeltaLogError: the DV deletes rows beyond the end of the file.
    """
    rows = deleted_rows(dv)
    if len(rows) and int(rows[-1]) >= num_rows:
        raise DeltaLogError(
            f"{dv.describe()} deletes row {int(rows[-1])} of {data_file}, which has only {num_rows} rows"
        )
    mask = np.ones(num_rows, dtype=np.bool_)
    mask[rows.astype(np.int64)] = False
    return mask


def serialize_bitmap_array(rows: np.ndarray[Any, Any] | BitMap64) -> bytes:
    """The ``RoaringBitmapArray`` of the row indexes ``rows`` (an array, or a bitmap, which this run-optimizes) in the
    portable format (magic 1681511377), run-length optimized as Delta's ``BitmapAggregator`` leaves it. Runs on
    executors."""
    from pyroaring import BitMap64

    bitmap = rows if isinstance(rows, BitMap64) else BitMap64(np.asarray(rows, dtype=np.uint64))
    bitmap.run_optimize()
    return struct.pack("<i", PORTABLE_MAGIC) + bitmap.serialize()


def deletion_vectors_writable(protocol: Mapping[str, Any], configuration: Mapping[str, Any]) -> bool:
    """True when a DELETE, UPDATE or MERGE marks rows deleted with deletion vectors instead of rewriting files: the
    protocol has the ``deletionVectors`` writer feature and ``delta.enableDeletionVectors`` is true (Delta's
    ``DeletionVectorUtils.deletionVectorsWritable``)."""
    features = set(protocol.get("writerFeatures") or [])
    return "deletionVectors" in features and enabled(configuration, ENABLE_PROPERTY)


def random_prefix_length(configuration: Mapping[str, Any]) -> int:
    """The length of the random folder a new deletion vector file goes into: ``delta.randomPrefixLength`` (default
    2) when ``delta.randomizeFilePrefixes`` is true, else 0 (the table root), as Delta's ``getRandomPrefixLength``."""
    if not enabled(configuration, "delta.randomizeFilePrefixes"):
        return 0
    return int(property_value(configuration, "delta.randomPrefixLength") or 2)


class DeletionVectorFile:
    """One new deletion vector file holding the bitmaps of one executor task, at successive offsets (Delta's
    ``DeletionVectorStore.Writer``): the format version byte, then per bitmap its big-endian int32 size, the
    bitmap and its big-endian CRC32. Built in memory, stored whole by :meth:`store`. Runs on executors."""

    def __init__(self, *, prefix_length: int = 0) -> None:
        self.uuid = uuid.uuid4()
        self.prefix = "".join(random.choices(string.ascii_letters + string.digits, k=prefix_length))
        name = f"deletion_vector_{self.uuid}.bin"
        self.relative_path = f"{self.prefix}/{name}" if self.prefix else name
        """The file's path relative to the table root (what :func:`dv_relative_path` gives of its descriptors)."""
        self._data = bytearray([FILE_FORMAT_VERSION])

    def add(self, rows: np.ndarray[Any, Any] | BitMap64) -> dict[str, Any]:
        """Append the bitmap of the (distinct) row indexes ``rows``; return its ``deletionVector`` descriptor
        (storage type ``u``) as Delta writes it."""
        bitmap = serialize_bitmap_array(rows)
        offset = len(self._data)
        self._data += struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
        return {
            "storageType": "u",
            "pathOrInlineDv": self.prefix + z85_encode(self.uuid.bytes),
            "offset": offset,
            "sizeInBytes": len(bitmap),
            "cardinality": len(rows),
        }

    def store(self, location: TableLocation) -> None:
        """Write the file under the table root (nothing references it before a Delta commit names it).

        Raises:
            StorageError: the store failed or refused the write.
        """
        location.put(self.relative_path, bytes(self._data))


def dv_relative_path(deletion_vector: Mapping[str, Any]) -> str | None:
    """Return the table-relative path of a deletion vector file (storage type ``u``), else ``None``.

    ``pathOrInlineDv`` is ``<random prefix><20 Z85 chars of a UUID>``; the file is
    ``<prefix>/deletion_vector_<uuid>.bin`` (PROTOCOL.md, "Deletion Vector Descriptor Schema"). Runs anywhere.
    """
    if deletion_vector.get("storageType") != "u":
        return None
    encoded = str(deletion_vector.get("pathOrInlineDv", ""))
    if len(encoded) < 20:
        return None
    prefix, z85 = encoded[:-20], encoded[-20:]
    try:
        raw = z85_decode(z85, 16)
    except (KeyError, ValueError, OverflowError):
        return None
    name = f"deletion_vector_{uuid.UUID(bytes=raw)}.bin"
    return f"{prefix}/{name}" if prefix else name


__all__ = [
    "ENABLE_PROPERTY",
    "FILE_FORMAT_VERSION",
    "NATIVE_MAGIC",
    "PORTABLE_MAGIC",
    "DeletionVector",
    "DeletionVectorFile",
    "deleted_rows",
    "deletion_vectors_writable",
    "dv_relative_path",
    "keep_mask",
    "parse_bitmap_array",
    "random_prefix_length",
    "serialize_bitmap_array",
    "serialized_bitmap",
    "z85_decode",
    "z85_encode",
]
