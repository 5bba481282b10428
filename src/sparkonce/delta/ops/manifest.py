"""``GENERATE symlink_format_manifest FOR TABLE t``: the manifests that let Presto, Trino, Athena and Hive read a
Delta table's newest snapshot as plain Parquet, as Delta writes them: ``_symlink_format_manifest/manifest`` (one per
partition directory, ``_symlink_format_manifest/<col>=<value>/.../manifest``, for a partitioned table), each listing
the absolute URIs of the snapshot's data files, one per line; manifests of partitions no longer in the table are
removed.

Runs on the driver (the manifests hold file names only; no data is read).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sparkonce.delta.log.paths import data_file_uri, require_fs_path
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.write.files import partition_directory
from sparkonce.errors import UnsupportedFeatureError
from sparkonce.storage import TableLocation, table_location

MANIFEST_DIR = "_symlink_format_manifest"


@dataclass(frozen=True)
class ManifestResult:
    manifests: int
    """Manifest files written."""
    files: int
    """Data files they list."""
    removed: int
    """Manifests of partitions no longer in the table, removed."""


def generate_symlink_manifest(table: str | TableLocation) -> ManifestResult:
    """Write the symlink manifests of the table's newest snapshot.

    Raises:
        UnsupportedFeatureError: the table has deletion vectors (a manifest cannot say which rows are deleted;
            Delta refuses too).
        TableNotFoundError: no Delta table there.
    """
    import pyarrow.fs as pafs

    location = table_location(table)
    snapshot = existing_table(location).snapshot
    files = list(snapshot.files.values())
    if any(add.get("deletionVector") for add in files):
        raise UnsupportedFeatureError(
            f"GENERATE symlink_format_manifest on {location}: the table has deletion vectors, which a manifest cannot "
            "express (run OPTIMIZE or REORG to purge them first); nothing was written"
        )
    if snapshot.configuration.get("delta.columnMapping.mode", "none") != "none":
        raise UnsupportedFeatureError(
            f"GENERATE symlink_format_manifest on {location}: the table uses column mapping, whose Parquet files "
            "external readers cannot read through a manifest (Delta refuses too); nothing was written"
        )
    partitions = list(snapshot.metadata.get("partitionColumns") or [])
    by_directory: dict[str, list[str]] = defaultdict(list)
    for add in files:
        raw = add.get("partitionValues") or {}  # the log's own strings, as Delta names the partition folders
        directory = partition_directory({c: raw.get(c) for c in partitions})
        fs_path = require_fs_path(location, add["path"])
        uri = fs_path if location.is_local else data_file_uri(location, fs_path)  # as Hadoop prints it
        by_directory[directory].append(uri)
    if not partitions:
        by_directory.setdefault("", [])
    wanted = {
        f"{MANIFEST_DIR}/{d}/manifest" if d else f"{MANIFEST_DIR}/manifest": uris for d, uris in by_directory.items()
    }
    for relative, uris in wanted.items():
        location.put(relative, "".join(f"{u}\n" for u in sorted(uris)).encode())
    filesystem = location.filesystem()
    listed = filesystem.get_file_info(
        pafs.FileSelector(location.fs_path(MANIFEST_DIR), recursive=True, allow_not_found=True)
    )
    base = location.fs_path("")
    removed = 0
    for info in listed:
        relative = info.path[len(base) :].lstrip("/") if location.is_local else info.path
        if info.type == pafs.FileType.File and info.base_name == "manifest" and relative not in wanted:
            filesystem.delete_file(info.path)
            removed += 1
    return ManifestResult(len(wanted), len(files), removed)


__all__ = ["MANIFEST_DIR", "ManifestResult", "generate_symlink_manifest"]
