"""Placeholder for the Delta streaming source (next commit)."""
