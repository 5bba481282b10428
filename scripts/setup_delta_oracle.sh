#!/usr/bin/env bash
# Installs the delta-spark oracle of the test suite (tests/oracle): a second virtualenv, .venv-delta, with PySpark
# 4.2 and delta-spark (whose newest release, 4.4, does not run on sparkonce's PySpark 4.3), and the Delta jars of
# tests/oracle/pom.xml resolved by Maven into .venv-delta/jars (no Ivy download when a session starts). Safe to run
# again, and from two pytest-xdist workers at once (a lock); a stamp makes a second run instant.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-delta
pins=(pyspark==4.2.0 delta-spark==4.4.0)
mkdir -p "$venv"
exec 9>"$venv/.lock"
flock 9

stamp=$venv/.oracle-installed
want="$(cat tests/oracle/pom.xml "$0" | sha256sum | cut -d' ' -f1) $(readlink -f "$PWD")"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
rm -f "$stamp"
if ! command -v mvn >/dev/null 2>&1; then
  echo "setup: installing maven (Debian package) for the delta-spark oracle's jars"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends maven >/dev/null
fi
python=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"

# Every jar Delta needs at run time, less those PySpark ships (Spark's own, newer, copies stay the ones loaded).
spark_jars="$("$venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
resolved="$venv/jars-resolved"
rm -rf "$resolved" "$venv/jars"
mvn -q -B -Dstyle.color=never -f tests/oracle/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$resolved"
mkdir -p "$venv/jars"
for jar in "$resolved"/*.jar; do
  base=$(basename "$jar" .jar)
  compgen -G "$spark_jars/${base%-[0-9]*}-[0-9]*.jar" >/dev/null || cp "$jar" "$venv/jars/"
done
rm -rf "$resolved"
compgen -G "$venv/jars/delta-spark_*.jar" >/dev/null || { echo "setup: no delta-spark jar resolved" >&2; exit 1; }
echo "$want" >"$stamp"
echo "setup: delta-spark oracle ready ($venv: $(ls "$venv/jars" | wc -l) jars)"
