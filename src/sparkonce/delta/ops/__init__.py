"""The operations layer of ``sparkonce.delta``: DML and maintenance over rewrites of files. MERGE, UPDATE,
DELETE, OPTIMIZE and auto compaction, VACUUM, manifests; ALTER TABLE and CREATE / REPLACE.

Imports the read, write, txn, table and log layers only; the face (``sparkonce.delta``'s flat modules)
sits above it.
"""
