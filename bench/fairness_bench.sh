#!/usr/bin/env bash
# Other sessions' index scans while one session's huge batch search holds the
# GPU worker. ROWS rows of DIMS dimensions in 100 clusters, each on its own
# random 16-dim subspace (test/support/subspace_clusters.py, overlapping), a
# tsdg index at default options. SCANS index scans (LIMIT 10, tsdg.ef_search
# 100, tsdg.worker_timeout_ms 1 hour so that a scan waits for the worker
# rather than searching on the CPU) are timed one by one in one session:
# first with the worker idle, then while another session's tsdg_search_batch
# of BATCH queries, each ten times, at k 100 and tsdg.ef_search 1000 (about
# the search work of BATCH queries at an ef of 10000, which the setting does
# not reach) waits for the worker.
# The huge batch is then cancelled (pg_cancel_backend) and the time until the
# worker answers a scan again is measured. Reports latency p50 / p95 / max,
# recall@10 of the scans against a sequential scan, and whether every scan
# completed while the huge batch was still waiting for the worker; and a
# batch of 10 queries from another client, idle and during the huge batch.
#
# usage: fairness_bench.sh [OUTDIR]   (default ./fairness-bench-out; starts its
# own cluster, with the worker on tsdg.worker_backend = TSDG_WORKER_BACKEND
# (default cuda), on $TSDG_BENCH_PORT, default 54347; ROWS (default 200000),
# DIMS (128), SCANS (200), BATCH (2000) override the sizes). Writes
# OUTDIR/fairness_bench.md and prints it.
#
# TSDG_BENCH_EXTERNAL=1: against a server already running with the worker
# (PGHOST, PGPORT, PGUSER of the environment, a superuser); it works in a
# database of its own, fairness_bench (dropped and created).
source "$(dirname "$0")/../scripts/common.sh"
out=$(realpath -m "${1:-fairness-bench-out}")
port=${TSDG_BENCH_PORT:-54347}
external=${TSDG_BENCH_EXTERNAL:-0}
rows=${ROWS:-200000}
dims=${DIMS:-128}
scans=${SCANS:-200}
batch=${BATCH:-2000}
backend=${TSDG_WORKER_BACKEND:-cuda}

mkdir -p "$out"
work=$(mktemp -d /tmp/fairness_bench.XXXXXX)
chmod 755 "$work"
if [ "$external" = 1 ]; then
  trap 'rm -rf "$work"' EXIT
  psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS fairness_bench' -c 'CREATE DATABASE fairness_bench'
else
  trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
  start_cluster "$work" "$port" "tsdg.worker_backend = $backend" "shared_buffers = 2GB" \
    "maintenance_work_mem = 4GB"
  psql -X -q -d postgres -c 'CREATE DATABASE fairness_bench'
fi
export PGDATABASE=fairness_bench
run() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

python=$(numpy_python)
"$python" "$TSDG_ROOT/test/support/subspace_clusters.py" "$rows" "$dims" 100 1 1 > "$work/items.tsv"
"$python" "$TSDG_ROOT/test/support/subspace_clusters.py" "$(( batch > scans ? batch : scans ))" "$dims" 100 1 2 \
  > "$work/queries.tsv"
chmod 644 "$work"/*.tsv
run -c 'CREATE EXTENSION pg_tsdg CASCADE' \
  -c "CREATE TABLE items (id int PRIMARY KEY, v vector($dims))" \
  -c "CREATE TABLE queries (id int PRIMARY KEY, v vector($dims))" \
  -c "\\copy items FROM '$work/items.tsv'" \
  -c "\\copy queries FROM '$work/queries.tsv'" \
  -c 'ANALYZE' \
  -c 'CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops)'
# the exact 10 nearest rows of each scan's query, and a function timing the
# scans one by one: (p50 ms, p95 ms, max ms, recall@10)
run <<SQL
SET enable_indexscan = off;
CREATE TABLE truth AS SELECT q.id, ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids
  FROM queries q WHERE q.id <= $scans;
CREATE FUNCTION timed_scans(OUT p50 float8, OUT p95 float8, OUT worst float8, OUT recall float8)
LANGUAGE plpgsql AS \$\$
DECLARE t timestamptz; ms float8[] := '{}'; hits int := 0; got int[]; r record;
BEGIN
  FOR r IN SELECT q.id, q.v, t2.ids FROM queries q JOIN truth t2 USING (id) ORDER BY q.id LOOP
    t := clock_timestamp();
    got := ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> r.v LIMIT 10);
    ms := ms || (extract(epoch FROM clock_timestamp() - t) * 1000)::float8;
    hits := hits + (SELECT count(*) FROM unnest(got) g WHERE g = ANY (r.ids));
  END LOOP;
  SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY m), percentile_disc(0.95) WITHIN GROUP (ORDER BY m), max(m)
    INTO p50, p95, worst FROM unnest(ms) m;
  recall := hits / (10.0 * array_length(ms, 1));
END \$\$;
CREATE FUNCTION timed_small_batch() RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE t timestamptz := clock_timestamp();
BEGIN
  PERFORM count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id <= 10), 10);
  RETURN extract(epoch FROM clock_timestamp() - t) * 1000;
END \$\$;
SQL
scan_settings="SET enable_seqscan = off; SET tsdg.worker_timeout_ms = '1h';"
# the worker holds the index and has served scans before the idle timing
run -c "$scan_settings SELECT * FROM timed_scans()" >/dev/null
idle=$(run -At -F ' | ' -c "$scan_settings SELECT round(p50::numeric, 2), round(p95::numeric, 2), round(worst::numeric, 2), round(recall::numeric, 4) FROM timed_scans()")
small_idle=$(run -At -c "SELECT round(timed_small_batch()::numeric, 2)")

psql -X -d fairness_bench -c "SET application_name = 'huge_batch'" -c 'SET tsdg.ef_search = 1000' \
  -c "SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v ORDER BY round, id) FROM queries, generate_series(1, 10) AS round WHERE id <= $batch), 100)" \
  > "$work/huge_batch.out" 2>&1 &
huge=$!
waiting="SELECT count(*) FROM pg_stat_activity WHERE application_name = 'huge_batch' AND wait_event_type = 'Extension'"
for _ in $(seq 600); do
  [ "$(run -At -c "$waiting")" = 1 ] && break
  sleep 0.1
done
sleep 1
busy=$(run -At -F ' | ' -c "$scan_settings SELECT round(p50::numeric, 2), round(p95::numeric, 2), round(worst::numeric, 2), round(recall::numeric, 4) FROM timed_scans()")
small_busy=$(run -At -c "SELECT round(timed_small_batch()::numeric, 2)")
still=$(run -At -c "$waiting")
cancel_start=$(date +%s.%N)
run -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'huge_batch'" >/dev/null
wait "$huge" || true
run -c "$scan_settings SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 10) s" >/dev/null
after_cancel=$(echo "$(date +%s.%N) - $cancel_start" | bc)
commit=$(git -C "$TSDG_ROOT" rev-parse --short HEAD)

{
  echo "# Index scans during another session's huge batch"
  echo
  echo "commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), worker backend: $( [ "$external" = 1 ] && echo 'the server'"'"'s' || echo "$backend" ), $(nproc) cores"
  echo
  echo "$rows rows x $dims dims, 100 overlapping subspace clusters; $scans index scans (LIMIT 10, ef_search 100) timed one by one;"
  echo "huge batch: tsdg_search_batch of $batch queries ten times over, k 100, ef_search 1000, in another session."
  echo
  echo "| scans | p50 ms | p95 ms | max ms | recall@10 |"
  echo "|---|---|---|---|---|"
  echo "| worker idle | $idle |"
  echo "| during the huge batch | $busy |"
  echo
  echo "A batch of 10 queries (k 10) from another client: ${small_idle} ms with the worker idle, ${small_busy} ms during the huge batch."
  echo "The huge batch still waiting for the worker after the last scan and that batch: $( [ "$still" = 1 ] && echo yes || echo no)."
  echo "From pg_cancel_backend of the huge batch to the next scan's answer: ${after_cancel} s."
  echo "huge batch session: $(tr '\n' ' ' < "$work/huge_batch.out")"
} | tee "$out/fairness_bench.md"
