"""The write layer of ``sparkonce.delta``: executor-side file writing. Parquet data files with statistics and
partition folders, the written files back to the driver, change data files.

Imports the txn, table and log layers only.
"""
