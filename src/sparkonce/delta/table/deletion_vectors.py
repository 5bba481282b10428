"""Deletion vectors, read side: which rows of a data file a Delta table has deleted without rewriting the file.

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
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import numpy as np

from sparkonce.errors import DeltaLogError, UnsupportedFeatureError
from sparkonce.storage import TableLocation, table_location

StorageType = Literal["u", "p", "i"]

PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
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
    "NATIVE_MAGIC",
    "PORTABLE_MAGIC",
    "DeletionVector",
    "deleted_rows",
    "dv_relative_path",
    "keep_mask",
    "parse_bitmap_array",
    "serialized_bitmap",
    "z85_decode",
]
