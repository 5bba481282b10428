"""The ``sparkonce`` command line: thin commands over core functions; rendering and exit codes live here only."""
