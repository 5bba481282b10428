"""The embedded daemons for demos, tests and benchmarks: broker, object store, PostgreSQL server, Spark cluster,
fault proxy, and the sample producer. They run on the machine that starts them (CLI or test session)."""
