#!/usr/bin/env bash
# The SQL benchmark suite in one command.
#   bench/run.sh [sql_bench.py options]
# Without connection options it builds and installs the extension, starts a private
# cluster (port $TSDG_BENCH_PORT, default 54338) and stops it at the end. With --dsn, or
# with PGHOST set (as on the GPU machine after pg-on-device.sh), it uses that server.
# Results land in --out (default bench-out/): results.json, results.md, *.png.
# TSDG_BENCH_SKIP_BUILD=1 benchmarks the extension already installed, without building.
source "$(dirname "$0")/../scripts/common.sh"

# Debian's python3 has numpy and matplotlib (install_dependencies); a python3 earlier on
# PATH (pyenv, a venv) may not.
python=python3
if /usr/bin/python3 -c 'import numpy, matplotlib' 2>/dev/null; then python=/usr/bin/python3; fi
bench=("$python" "$TSDG_ROOT/bench/sql_bench.py")

existing_server=${PGHOST:+yes}
for arg in "$@"; do
  case "$arg" in --dsn|--dsn=*) existing_server=yes ;; esac
done
if [ -n "$existing_server" ]; then
  exec "${bench[@]}" "$@"
fi

install_dependencies
[ -n "${TSDG_BENCH_SKIP_BUILD:-}" ] || build_and_install
work=$(mktemp -d /tmp/pg_tsdg_bench.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
log "starting a private cluster in $work"
start_cluster "$work" "${TSDG_BENCH_PORT:-54338}" \
  "shared_buffers = 2GB" "maintenance_work_mem = 2GB" "jit = off" "max_connections = 200"
"${bench[@]}" "$@"
