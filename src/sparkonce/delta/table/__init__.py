"""The table layer of ``sparkonce.delta``: table metadata. Properties, the protocol and its features, schema,
column mapping, clustering, identity and generated columns, the evaluation of CHECK constraints, the Arrow
expression evaluator, partition filters, deletion vectors, statistics columns, sparkonce's catalog, read
and write options, type widening.

Imports the log layer only.
"""
