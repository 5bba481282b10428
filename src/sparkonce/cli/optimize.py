"""``sparkonce optimize``: compact a Delta table's small files (a thin command over
:func:`sparkonce.delta.ops.optimize.optimize_table`).

Exit codes: 0 done (or nothing to compact), 2 usage error (bad size, a ``--where`` on non-partition columns),
3 not a Delta table, 1 a commit conflict (a concurrent writer removed a file being compacted).
"""

from __future__ import annotations

import click
from rich.table import Table

from sparkonce.cli.common import TABLE, console, handle_errors, json_option, print_json, storage_option, to_jsonable
from sparkonce.errors import OptionError, SqlError
from sparkonce.storage import table_location

__all__ = ["optimize"]


@click.command()
@click.argument("table", type=TABLE)
@storage_option
@click.option("--where", default=None, metavar="PREDICATE", help="SQL predicate on partition columns only.")
@click.option(
    "--target-file-size",
    default="1g",
    show_default=True,
    metavar="SIZE",
    help="Files below this size are packed into files of about this size (bytes, or 512k, 128m, 1g).",
)
@json_option()
@handle_errors
def optimize(
    table: str, storage_options: dict[str, str], where: str | None, target_file_size: str, as_json: bool
) -> None:
    """Bin-pack TABLE's small files into larger ones in one OPTIMIZE commit (dataChange=false: streaming
    readers do not re-read the rows; safe while a stream appends to TABLE)."""
    from sparkonce.delta.ops.optimize import optimize_table
    from sparkonce.options import get_bytes

    size = get_bytes({"target-file-size": target_file_size}, "target-file-size")
    assert size is not None
    location = table_location(table, storage_options=storage_options)
    try:
        result = optimize_table(location, where=where, target_file_size=size)
    except SqlError as err:  # the --where predicate Delta refuses (DELTA_NON_PARTITION_COLUMN_REFERENCE): usage
        raise OptionError("--where", where, str(err)) from err
    if as_json:
        print_json({"kind": "optimize", **to_jsonable(result)})
        return
    if result.table_version is None:
        console.print(f"{table}: nothing to compact ({result.considered_files} file(s) considered)")
        return
    out = Table(title=f"OPTIMIZE {table} -> table version {result.table_version}")
    for name in ("files removed", "files added", "bytes removed", "bytes added", "rows", "partitions"):
        out.add_column(name, justify="right")
    out.add_row(
        str(result.files_removed),
        str(result.files_added),
        str(result.bytes_removed),
        str(result.bytes_added),
        str(result.rows),
        str(result.partitions_optimized),
    )
    console.print(out)
