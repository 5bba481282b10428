"""The transaction layer of ``sparkonce.delta``: the one commit engine (:mod:`~sparkonce.delta.txn.commit`)
and what it needs: Delta's conflict rules, the files of failed attempts, the registry of the streams
reading a table, log cleanup, the txn of batches a RESTORE undid. Runs on the driver.

Imports the table and log layers only.
"""
