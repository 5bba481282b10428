"""The log layer of ``sparkonce.delta``: the Delta log without Spark. Reading commits and checkpoints into a
snapshot (:mod:`~sparkonce.delta.log.delta_log`), the actions a commit holds as Delta writes them, log
checkpoints, tombstones, the kept snapshot of each table, table paths, time.

The bottom layer: its modules import no other layer of ``sparkonce.delta``.
"""
