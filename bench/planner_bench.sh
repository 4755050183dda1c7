#!/usr/bin/env bash
# The planner's choice for ORDER BY v <-> q LIMIT 10 against the measured
# times of both plans: for each tsdg.ef_search, the plan EXPLAIN picks, the
# index scan's time (sequential scan off) and the sequential scan's time
# (index scans off), each the backend's CPU time a query (getrusage of the
# backend, read from /proc around passes over the QUERIES queries in one
# session, about a second of them), so that other work on a shared machine
# changes them little.
#
# usage: bench/planner_bench.sh ROWS.tsv QUERIES.tsv [EF...]
#   ROWS.tsv, QUERIES.tsv: "id<TAB>[x1,...]" lines (bench/mnist_data.sh writes
#   MNIST's; test/support/subspace_clusters.py writes hard synthetic rows);
#   EF: default 10 20 40 100 200 400 700 1000
# PLANNER_FILTERS: WHERE clauses on cat, a column of id % 100, separated by
# ";" (e.g. "cat = 3;cat < 10"): each is timed and planned after the
# unfiltered query, as a filter above the scan widens the index's search.
# Starts its own cluster (port 54373 + TSDG_PORT_OFFSET, no preload: the
# scans run in the session on the CPU) in a temporary directory, with the
# installed pg_tsdg (TSDG_PG_PREFIX picks a private copy, as for the tests);
# default index options; shared_buffers 1GB, the table and index prewarmed.
source "$(dirname "$0")/../scripts/common.sh"
rows_file=$(realpath "${1:?usage: bench/planner_bench.sh ROWS.tsv QUERIES.tsv [EF...]}")
queries_file=$(realpath "${2:?usage: bench/planner_bench.sh ROWS.tsv QUERIES.tsv [EF...]}")
shift 2
ef_values=("$@")
[ ${#ef_values[@]} -gt 0 ] || ef_values=(10 20 40 100 200 400 700 1000)

work=$(mktemp -d /tmp/tsdg_planner_bench.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
start_cluster "$work" 54373 "shared_preload_libraries = ''" "shared_buffers = '1GB'" \
  "maintenance_work_mem = '2GB'"
dims=$(tsv_dims "$rows_file")
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_tsdg CASCADE" -c "CREATE EXTENSION pg_prewarm"
load_vector_tables "$work" "$rows_file" "$queries_file"
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER TABLE items ADD COLUMN cat int GENERATED ALWAYS AS (id % 100) STORED" \
  -c "VACUUM ANALYZE items" -c "CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops)"

/usr/bin/python3 - "$dims" "${PLANNER_FILTERS:-}" "${ef_values[@]}" <<'PY'
import subprocess, sys
dims, ef_values = int(sys.argv[1]), [int(a) for a in sys.argv[3:]]
filters = [""] + ["WHERE " + f.strip() for f in sys.argv[2].split(";") if f.strip()]

def psql(sql):
    return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"], input=sql,
                          capture_output=True, text=True, check=True).stdout.strip()

# backend CPU time (user + system, clock ticks) from /proc/<pid>/stat, read by
# the server itself through pg_read_file on its own process
TIMED = """
SELECT pg_prewarm('items'), pg_prewarm('items_v'), pg_prewarm('pg_toast.' || (
  SELECT c2.relname FROM pg_class c JOIN pg_class c2 ON c2.oid = c.reltoastrelid WHERE c.relname = 'items'))
  WHERE EXISTS (SELECT 1 FROM pg_class WHERE relname = 'items' AND reltoastrelid <> 0);
CREATE TEMP TABLE result (ms float8);
CREATE FUNCTION pg_temp.ticks() RETURNS bigint LANGUAGE sql AS $$
  SELECT (split_part(s, ' ', 13))::bigint + (split_part(s, ' ', 14))::bigint
  FROM (SELECT regexp_replace(pg_read_file('/proc/' || pg_backend_pid() || '/stat'), '^.*\\) ', 'x ') s) x $$;
-- with enable_seqscan off, the loop's own read of the queries is priced past
-- jit_above_cost: compiling it each loop would count as the index's time
SET jit = off;
%(settings)s
-- a first pass warms the caches and times one pass; then as many passes as
-- take about a second, since the clock ticks 100 times a second
DO $$ DECLARE q vector; started timestamptz := clock_timestamp(); passes int; ticks bigint; BEGIN
  FOR q IN SELECT v FROM queries LOOP PERFORM id FROM items %(filter)s ORDER BY v <-> q LIMIT 10; END LOOP;
  passes := least(1000, ceil(1.0 / greatest(extract(epoch FROM clock_timestamp() - started), 0.001)));
  ticks := pg_temp.ticks();
  FOR pass IN 1..passes LOOP
    FOR q IN SELECT v FROM queries LOOP PERFORM id FROM items %(filter)s ORDER BY v <-> q LIMIT 10; END LOOP;
  END LOOP;
  INSERT INTO result SELECT (pg_temp.ticks() - ticks) * 1000.0 / 100 / (passes * count(*)) FROM queries;
END $$;
SELECT ms FROM result;
"""

def ms_a_query(settings, filter):
    return float(psql(TIMED % {"settings": settings, "filter": filter}).splitlines()[-1])

def plan(ef, filter, settings=""):
    q = psql("SELECT v FROM queries LIMIT 1")
    out = psql("%s SET tsdg.ef_search = %d; EXPLAIN SELECT id FROM items %s ORDER BY v <-> '%s' LIMIT 10;"
               % (settings, ef, filter, q))
    return "index" if "Index Scan using items_v" in out else "seq scan" if "Seq Scan" in out else out

# the index's time: sorts off too, or a scan of the primary key and a sort
# would stand in for a plan that the planner prices above it
INDEX_ONLY = "SET enable_seqscan = off; SET enable_sort = off;"

queries = int(psql("SELECT count(*) FROM queries"))
toast = psql("SELECT pg_size_pretty(pg_relation_size(reltoastrelid)) FROM pg_class WHERE relname = 'items'"
             " AND reltoastrelid <> 0") or "none"
print("%s rows x %d dims, %d queries; heap %s, its TOAST table %s (vectors of 2 kB and more are"
      " stored out of line)" % (psql("SELECT count(*) FROM items"), dims, queries,
                                psql("SELECT pg_size_pretty(pg_relation_size('items'))"), toast))
for filter in filters:
    seq = ms_a_query("SET enable_indexscan = off;", filter)
    print()
    if filter:
        print(filter)
        print()
    print("| tsdg.ef_search | plan chosen | index ms | seq scan ms | faster |")
    print("|---|---|---|---|---|")
    for ef in ef_values:
        assert plan(ef, filter, INDEX_ONLY) == "index"
        index = ms_a_query(INDEX_ONLY + " SET tsdg.ef_search = %d;" % ef, filter)
        chosen = plan(ef, filter)
        faster = "index" if index < seq else "seq scan"
        print("| %d | %s | %.3f | %.3f | %s |" % (ef, chosen, index, seq, faster), flush=True)
PY
