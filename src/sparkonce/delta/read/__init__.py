"""The read layer of ``sparkonce.delta``: planning and reading. The Python data source reader, the native
read path (Spark's own Parquet scan over the files the log lists), the streaming source and its native
form, the change data feed, ``DESCRIBE HISTORY``.

Imports the write, txn, table and log layers only.
"""
