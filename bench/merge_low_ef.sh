#!/usr/bin/env bash
# Just-merged rows at a narrower ef than the merge's: a table of 50k x 128
# clustered rows gets its index, then two loads of 5k rows, each merged at
# the default tsdg.ef_search; after each merge, how many of the load's rows
# a search at ef 10, 20, 40, 100 and 200 does not return first; at the end
# the same for both loads after a fresh CREATE INDEX on all the rows.
#
# usage: merge_low_ef.sh   (starts its own cluster on $TSDG_BENCH_PORT,
# default 54371; prints "label|count" lines)
source "$(dirname "$0")/../scripts/common.sh"
port=${TSDG_BENCH_PORT:-54371}
work=$(mktemp -d /tmp/merge-low-ef.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"' EXIT
start_cluster "$work" "$port" "maintenance_work_mem = 1GB" >/dev/null
py=$(numpy_python)
gen="$(dirname "$0")/../test/support/clustered_vectors.py"
sql() { psql -X -q -p "$port" -h "$work" -d postgres -v ON_ERROR_STOP=1 "$@"; }
load_first=100000   # load L's ids start at L * load_first

# the rows of load $1 not found first by their own vector at ef $2
missed() {
  sql -At -c "SET enable_seqscan = off; SET tsdg.ef_search = $2;
    SELECT count(*) FROM t p WHERE p.id >= $(($1 * load_first)) AND p.id < $((($1 + 1) * load_first))
      AND (SELECT x.id FROM t x ORDER BY x.v <-> p.v LIMIT 1) <> p.id"
}

sql -c "CREATE EXTENSION pg_tsdg CASCADE" -c "CREATE TABLE t (id int, v vector(128))"
"$py" "$gen" 50000 128 1 | sql -c "COPY t FROM STDIN"
sql -c "CREATE INDEX ti ON t USING tsdg (v vector_l2_ops)"
for load in 1 2; do
  "$py" "$gen" 5000 128 $((load + 10)) |
    awk -F'\t' -v first=$((load * load_first)) '{ print $1 + first "\t" $2 }' | sql -c "COPY t FROM STDIN"
  sql -At -c "SELECT tsdg_merge('ti')" >/dev/null
  echo "load $load merged, rows the merge left unreached|$(sql -At -c "SELECT unreached FROM tsdg_index_info('ti')")"
  for ef in 10 20 40 100 200; do echo "load $load merged, missed at ef $ef|$(missed "$load" "$ef")"; done
done
sql -c "DROP INDEX ti" -c "CREATE INDEX ti ON t USING tsdg (v vector_l2_ops)"
for load in 1 2; do
  for ef in 10 20 40 100; do echo "load $load, fresh index, missed at ef $ef|$(missed "$load" "$ef")"; done
done
