#!/usr/bin/env bash
# Resolves Spark's Kafka connector and the jars it needs beside pyspark's (scripts/jars/spark-sql-kafka.xml) into
# .venv/share/sparkonce/spark-sql-kafka, for the Kafka oracle (sparkonce_local.services.spark_kafka). Maven's own
# repository (~/.m2) caches the downloads; a folder resolved from the same pom is kept as it is. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
pom=scripts/jars/spark-sql-kafka.xml
dest=.venv/share/sparkonce/spark-sql-kafka
stamp="$dest/.resolved"
want=$(sha256sum "$pom" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && compgen -G "$dest/spark-sql-kafka-*.jar" >/dev/null; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "oracle_jars: mvn is missing (scripts/setup.sh installs Debian's maven)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
mvn -B -q -f "$pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$dest" \
  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
echo "$want" >"$stamp"
echo "oracle_jars: $(ls "$dest" | tr '\n' ' ')"
