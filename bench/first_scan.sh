#!/usr/bin/env bash
# What a backend's first index scan costs against its later ones: the first
# scan of a graph version in a backend reads the graph's navigating layer
# (or navigating set) into the backend's memory and prepares it, which the
# later scans reuse. Each of CONNECTIONS new connections runs three searches
# (ORDER BY v <-> q LIMIT 10) and reports their times (psql's \timing, so
# the wall time of the statement in the client).
#
# usage: bench/first_scan.sh ROWS.tsv QUERIES.tsv [CONNECTIONS]
#   ROWS.tsv, QUERIES.tsv: "id<TAB>[x1,...]" lines (for instance from
#   test/support/subspace_clusters.py); CONNECTIONS default 3.
# Starts its own cluster (port 54374 + TSDG_PORT_OFFSET, no preload: the
# scans run in the session on the CPU) in a temporary directory, with the
# installed pg_tsdg (TSDG_PG_PREFIX picks a private copy, as for the tests);
# default index options, built in the session; shared_buffers 2GB, the
# index prewarmed, so that the first scan's reads are buffer hits.
source "$(dirname "$0")/../scripts/common.sh"
usage="usage: bench/first_scan.sh ROWS.tsv QUERIES.tsv [CONNECTIONS]"
rows_file=$(realpath "${1:?$usage}")
queries_file=$(realpath "${2:?$usage}")
connections=${3:-3}

work=$(mktemp -d /tmp/tsdg_first_scan.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
start_cluster "$work" 54374 "shared_preload_libraries = ''" "shared_buffers = '2GB'" \
  "maintenance_work_mem = '2GB'" "jit = off"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_tsdg CASCADE" -c "CREATE EXTENSION pg_prewarm"
load_vector_tables "$work" "$rows_file" "$queries_file"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops)" \
  -c "SELECT pg_prewarm('items_v')" >/dev/null
psql -X -c "SELECT rows, layer_nodes, pg_size_pretty(size) AS size FROM tsdg_index_info('items_v')"

for connection in $(seq "$connections"); do
  times=$(psql -X -q -v ON_ERROR_STOP=1 <<SQL | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | paste -sd ' '
\\timing on
SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 10) s;
SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 2) LIMIT 10) s;
SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 3) LIMIT 10) s;
SQL
)
  echo "connection $connection: searches 1 / 2 / 3 (ms): $times"
done
