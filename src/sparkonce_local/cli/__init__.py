"""The local layer's commands (quickstart, demo, chaos, broker, produce, storage, cluster).

Each is registered in the ``sparkonce.commands`` entry-point group (``pyproject.toml``), which the core's
``sparkonce`` command reads; each module checks the ``local`` extra when it is imported, so a missing extra fails
with the command to install it.
"""

from __future__ import annotations

from sparkonce.extras import require

require("local", "the local tooling commands (quickstart, demo, chaos, broker, storage, cluster)")
