#!/usr/bin/env bash
# Installs Spark for Python (pyspark 4.3.0, with DuckDB 1.5.6 and pytz beside it) into a virtual
# environment outside the clone ($OOMSCOPE_SPARK_VENV), idempotently, and Java 17 from Debian
# when no `java` is there: the fleet test (collector/tests/fleet_export.rs) runs the docs'
# queries on exported traces in Spark's local mode and in DuckDB and holds the answers equal.
# ~450 MB download, ~40 s; skipped when already there. Only the test command needs it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
SETUP_NAME=setup-spark
source "$(dirname "$0")/setup-log.sh"
venv="$OOMSCOPE_SPARK_VENV"
pins=("pyspark==4.3.0" "duckdb==1.5.6" "pytz==2026.6")
if ! command -v java >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    timed "the package lists (apt-get update)" $SUDO apt-get update -qq
    timed "Java 17 (Debian)" $SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
fi
if has_pins "$venv" "${pins[@]}"; then
    log "${pins[*]} already in $venv; $(java -version 2>&1 | head -n 1)"
    exit 0
fi
python3 -m venv "$venv"
timed "${pins[*]} into $venv (~450 MB download)" \
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
log "ready: $(java -version 2>&1 | head -n 1)"
