#!/usr/bin/env bash
# Incremental merge benchmark (CPU): 200k x 128 synthetic clustered
# rows. A fresh CREATE INDEX on all 200k rows is the reference (build time,
# recall@10). Then an index is built on the first 100k rows and 10 loads of
# 10k rows follow, each followed by tsdg_merge(): every merge is timed, and
# while each load's rows are pending and while each merge runs, rows just
# inserted are looked up by their own vector (the exact nearest row must come
# back first). At the end recall@10 is compared with the fresh build's.
#
# usage: merge_bench.sh [OUTDIR]   (default ./merge-bench-out; starts its own
# cluster on $TSDG_BENCH_PORT, default 54337; CHUNK, BASE_CHUNKS, LOADS, DIMS,
# QUERIES, PROBES override the sizes; MERGE_BENCH_DATA=overlapping draws the
# hard data of merge_bench_data.py). Writes OUTDIR/merge_bench.md and
# prints it.
#
# TSDG_BENCH_EXTERNAL=1: against a server already running (PGHOST, PGPORT,
# PGUSER and psql of the environment, e.g. the GPU machine's from
# .gpu/pg-on-device.sh): the benchmark works in a database of its own,
# merge_bench (dropped and created), and reads the server's log from
# TSDG_BENCH_SERVER_LOG when set. The merges and builds then go wherever
# that server sends them: through its GPU worker when it has one.
source "$(dirname "$0")/../scripts/common.sh"
out=$(realpath -m "${1:-merge-bench-out}")
port=${TSDG_BENCH_PORT:-54337}
external=${TSDG_BENCH_EXTERNAL:-0}
dims=${DIMS:-128}
chunk=${CHUNK:-10000}             # rows per load
base_chunks=${BASE_CHUNKS:-10}    # the first index: base_chunks * chunk rows
loads=${LOADS:-10}
queries=${QUERIES:-1000}           # recall@10 over these (200 left a query stuck in a wrong cluster worth 0.005)
probes=${PROBES:-20}              # just-inserted rows looked up after each load
total=$(( (base_chunks + loads) * chunk ))

mkdir -p "$out"
rm -f "$out/merge_phases.log" "$out/worker_merges.log"
work=$(mktemp -d /tmp/merge_bench.XXXXXX)
chmod 755 "$work"
if [ "$external" = 1 ]; then
  trap 'rm -rf "$work"' EXIT
  server_log=${TSDG_BENCH_SERVER_LOG:-}
  psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS merge_bench" -c "CREATE DATABASE merge_bench"
  export PGDATABASE=merge_bench
  command="TSDG_BENCH_EXTERNAL=1 CHUNK=$chunk BASE_CHUNKS=$base_chunks LOADS=$loads bash bench/merge_bench.sh"
  server="the running server at ${PGHOST:-localhost}:${PGPORT:-5432} (tsdg.worker_backend $(psql -X -At -c "SHOW tsdg.worker_backend" 2>/dev/null || echo ?))"
else
  trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
  start_cluster "$work" "$port" "autovacuum = off" "maintenance_work_mem = '2GB'" \
    "shared_buffers = '1GB'" "max_wal_size = '8GB'" "checkpoint_timeout = '30min'" \
    "track_wal_io_timing = on" \
    ${TSDG_BENCH_CONF:+"$TSDG_BENCH_CONF"}
  server_log=$work/server.log
  command="bash bench/merge_bench.sh"
  server="its own cluster${TSDG_BENCH_CONF:+ ($TSDG_BENCH_CONF)}"
fi
log_from=$( [ -n "$server_log" ] && wc -l <"$server_log" || echo 0)

sql() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
# Runs the SQL on stdin in one session, then prints the CPU seconds its
# backend used, all its threads (the wall time on a shared machine mostly
# measures what else runs).
echo 'awk -v tick="$(getconf CLK_TCK)" '"'"'{ printf "%.2f\n", ($14 + $15) / tick }'"'"' "/proc/$BACKEND_PID/stat"' >"$work/backend_cpu.sh"
with_cpu() {
  { echo 'SELECT pg_backend_pid() AS pid \gset'; echo '\setenv BACKEND_PID :pid'; cat; echo "\\! sh $work/backend_cpu.sh"; } | sql
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
bench_start=$(now)
gen="$TSDG_ROOT/bench/merge_bench_data.py"
py=$(numpy_python)
# bench tables: no autovacuum, whose VACUUM would merge the loads before tsdg_merge() does
no_autovacuum="WITH (autovacuum_enabled = off)"

log "generating $total x $dims clustered rows (chunks of $chunk loaded in parallel) and $queries queries with their exact top 10"
t0=$(now)
sql -c "CREATE EXTENSION IF NOT EXISTS pg_tsdg CASCADE" \
    -c "CREATE TABLE rows_all (id int, chunk int, v vector($dims)) $no_autovacuum" \
    -c "CREATE TABLE queries (id int, v vector($dims), truth int[])"
# the ground truth (float64, from the chunks regenerated) while the chunks load
"$py" "$gen" queries "$queries" "$dims" "$chunk" $((base_chunks + loads)) >"$work/queries.tsv" &
truth_pid=$!
jobs=$(( $(nproc) > 8 ? 8 : $(nproc) ))
seq 1 $((base_chunks + loads)) | xargs -P "$jobs" -I{} sh -c \
  "'$py' '$gen' rows $chunk $dims {} | psql -X -q -v ON_ERROR_STOP=1 -c 'COPY rows_all FROM STDIN (FORMAT binary)'" ||
  { echo "FAIL: loading the rows"; exit 1; }
wait "$truth_pid" || { echo "FAIL: computing the ground truth"; exit 1; }
sql -c "COPY queries FROM STDIN" <"$work/queries.tsv"
sql -c "CREATE INDEX ON rows_all (chunk)" -c "VACUUM ANALYZE rows_all"
[ "$(sql -c "SELECT count(*) FROM rows_all")" = "$total" ] || { echo "FAIL: rows_all does not hold $total rows"; exit 1; }
data_s=$(elapsed "$t0" "$(now)")
echo "data generated and loaded in ${data_s}s"

# recall@10 of the tsdg index of table $1 over the queries, at tsdg.ef_search $2,
# searched as the server's sessions search (through the worker when it runs),
# or with $3 = cpu by the session itself, through the pages
recall() {
  sql -c "SET enable_seqscan = off" -c "SET tsdg.ef_search = $2" -c "SET tsdg.device = ${3:-auto}" \
    -c "SELECT round(avg(hits) / 10, 4) FROM (
    SELECT (SELECT count(*) FROM (SELECT t.id FROM $1 t ORDER BY t.v <-> q.v LIMIT 10) a
            WHERE a.id = ANY (q.truth)) AS hits FROM queries q) s"
}

# whether a GPU worker (of any backend) takes requests
worker=$(sql -c "SELECT state IN ('ready', 'busy') FROM tsdg_gpu_status()" 2>/dev/null || echo f)
# with a worker: seconds until it holds the current graph of index $1 (it keeps
# the graph it built or merged, after its answer), so that searches measured
# are the worker's and not the CPU's while it loads; up to 60 s, else "-"
wait_resident() {
  local t0
  t0=$(now)
  [ "$worker" = t ] || { echo -; return; }
  for _ in $(seq 1 600); do
    if [ "$(sql -c "SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c,
          tsdg_index_info('$1') i WHERE c->>'index' = '$1' AND (c->>'graph_version')::bigint = i.graph_version")" -gt 0 ]; then
      elapsed "$t0" "$(now)"
      return
    fi
    sleep 0.1
  done
  echo -
}

log "fresh CREATE INDEX on all $total rows"
sql -c "CREATE TABLE fresh $no_autovacuum AS SELECT id, v FROM rows_all" -c "VACUUM ANALYZE fresh"
t0=$(now)
fresh_cpu=$(echo "CREATE INDEX fresh_idx ON fresh USING tsdg (v vector_l2_ops);" | with_cpu)
fresh_build=$(elapsed "$t0" "$(now)")
fresh_resident_s=$(wait_resident fresh_idx)
fresh_recall=$(recall fresh 64)
fresh_recall_low=$(recall fresh 10)
if [ "$worker" = t ]; then
  fresh_recall_cpu="$(recall fresh 64 cpu) / $(recall fresh 10 cpu)"
fi
fresh_size=$(sql -c "SELECT pg_relation_size('fresh_idx')")
sql -c "DROP TABLE fresh"
echo "fresh build ${fresh_build}s (CPU ${fresh_cpu}s), recall@10 $fresh_recall (ef_search 64), $fresh_recall_low (ef_search 10)"

log "index on the first $((base_chunks * chunk)) rows, then $loads loads of $chunk with a merge after each"
sql -c "CREATE TABLE inc $no_autovacuum AS SELECT id, v FROM rows_all WHERE chunk <= $base_chunks" -c "VACUUM ANALYZE inc"
t0=$(now)
sql -c "CREATE INDEX inc_idx ON inc USING tsdg (v vector_l2_ops)"
base_build=$(elapsed "$t0" "$(now)")

# looks up $probes random rows of chunk $1 by their own vector; prints misses
probe() {
  sql -c "SET enable_seqscan = off" -c "SELECT count(*) FILTER (WHERE first IS DISTINCT FROM id) FROM (
    SELECT p.id, (SELECT t.id FROM inc t ORDER BY t.v <-> p.v LIMIT 1) AS first
    FROM (SELECT id, v FROM rows_all WHERE chunk = $1 ORDER BY random() LIMIT $probes) p) s"
}

# the cluster's WAL so far (pg_stat_wal): MB, writes, syncs, and their ms
# (0 unless track_wal_io_timing is on)
wal_stats() {
  sql -c "SELECT round(wal_bytes / 1048576.0) || ' ' || wal_write || ' ' || wal_sync || ' ' ||
    round(wal_write_time) || ' ' || round(wal_sync_time) FROM pg_stat_wal"
}
# what the WAL did between two wal_stats
wal_delta() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%d MB, %d writes (%d ms), %d syncs (%d ms)", y[1] - x[1], y[2] - x[2], y[4] - x[4], y[3] - x[3], y[5] - x[5] }'
}

table="| load | rows after | insert s | merge s | merge / fresh build | merge CPU s | merge / fresh build, CPU | probes (misses) while pending | probes (misses) during the merge | merged rows the searches do not reach (scored exactly) | worker holds the merged graph after s | the merge's WAL |"
table+=$'\n'"|---|---|---|---|---|---|---|---|---|---|---|---|"
max_ratio=0
max_cpu_ratio=0
misses_total=0
probes_total=0
for l in $(seq 1 "$loads"); do
  c=$((base_chunks + l))
  t0=$(now)
  sql -c "INSERT INTO inc SELECT id, v FROM rows_all WHERE chunk = $c"
  insert_s=$(elapsed "$t0" "$(now)")
  pending_misses=$(probe "$c")

  wal_before=$(wal_stats)
  t0=$(now)
  # the merge's DEBUG1 line says where its time went
  # the merge's own end: the probe loop below notices it up to a probe and a second later
  { printf '%s\n' "SET client_min_messages = debug1;" "SELECT tsdg_merge('inc_idx');" |
      with_cpu >"$work/merge.out" 2> >(grep -A1 'tsdg merge of' >>"$out/merge_phases.log")
    now >"$work/merge.end"; } &
  merge_pid=$!
  during=0
  during_misses=0
  # one batch of probes a second, so that the lookups barely slow the merge
  while kill -0 "$merge_pid" 2>/dev/null; do
    m=$(probe "$c")
    during=$((during + probes))
    during_misses=$((during_misses + m))
    sleep 1
  done
  wait "$merge_pid"
  merge_s=$(elapsed "$t0" "$(cat "$work/merge.end")")
  merged=$(head -1 "$work/merge.out")
  merge_cpu=$(tail -1 "$work/merge.out")
  [ "$merged" = "$chunk" ] || { echo "FAIL: merge $l merged $merged rows, expected $chunk"; exit 1; }
  ratio=$(awk -v m="$merge_s" -v f="$fresh_build" 'BEGIN { printf "%.3f", m / f }')
  cpu_ratio=$(awk -v m="$merge_cpu" -v f="$fresh_cpu" 'BEGIN { printf "%.3f", m / f }')
  max_cpu_ratio=$(awk -v a="$cpu_ratio" -v b="$max_cpu_ratio" 'BEGIN { print (a > b) ? a : b }')
  max_ratio=$(awk -v a="$ratio" -v b="$max_ratio" 'BEGIN { print (a > b) ? a : b }')
  misses_total=$((misses_total + pending_misses + during_misses))
  probes_total=$((probes_total + probes + during))
  read -r rows_after unreached < <(sql -F ' ' -c "SELECT rows, unreached FROM tsdg_index_info('inc_idx')")
  resident_s=$(wait_resident inc_idx)
  wal=$(wal_delta "$wal_before" "$(wal_stats)")
  table+=$'\n'"| $l | $rows_after | $insert_s | $merge_s | $ratio | $merge_cpu | $cpu_ratio | $probes ($pending_misses) | $during ($during_misses) | $unreached | $resident_s | $wal |"
  echo "load $l: merge ${merge_s}s ($ratio of the fresh build; CPU ${merge_cpu}s, $cpu_ratio), misses $pending_misses pending, $during_misses of $during during the merge"
done

inc_recall=$(recall inc 64)
inc_recall_low=$(recall inc 10)
if [ "$worker" = t ]; then
  inc_recall_cpu="$(recall inc 64 cpu) / $(recall inc 10 cpu)"
fi
info=$(sql -c "SELECT concat_ws(', ', 'rows ' || rows, 'pending ' || pending, 'graph_version ' || graph_version, 'merges ' || merges, 'size ' || pg_size_pretty(size)) FROM tsdg_index_info('inc_idx')")
# what scoring the last merge's unreached rows costs a search: one session's
# searches of the queries (one statement, best of 5), with them, then after a
# merge of one more row, which leaves none or one
search_ms() {
  sql -c "SET enable_seqscan = off" -c "CREATE FUNCTION pg_temp.best_ms() RETURNS float8 LANGUAGE plpgsql AS \$\$
    DECLARE t0 timestamptz; best float8 := 'infinity';
    BEGIN
      FOR i IN 1..5 LOOP
        t0 := clock_timestamp();
        PERFORM count(*) FROM queries q, LATERAL (SELECT id FROM inc ORDER BY v <-> q.v LIMIT 10) s;
        best := least(best, extract(epoch FROM clock_timestamp() - t0) * 1000);
      END LOOP;
      RETURN best / (SELECT count(*) FROM queries);
    END \$\$" -c "SELECT round(pg_temp.best_ms()::numeric, 3)"
}
unreached_before=$(sql -c "SELECT unreached FROM tsdg_index_info('inc_idx')")
search_before=$(search_ms)
sql -c "INSERT INTO inc SELECT -1, v FROM queries ORDER BY id LIMIT 1" -c "SELECT tsdg_merge('inc_idx')" >/dev/null
unreached_after=$(sql -c "SELECT unreached FROM tsdg_index_info('inc_idx')")
search_after=$(search_ms)

recall_gap=$(awk -v a="$fresh_recall" -v b="$inc_recall" 'BEGIN { printf "%.4f", a - b }')
recall_gap_low=$(awk -v a="$fresh_recall_low" -v b="$inc_recall_low" 'BEGIN { printf "%.4f", a - b }')

# the worker's LOG lines of the builds and merges: where a merge's time went on the worker
if [ -n "$server_log" ]; then
  tail -n +"$((log_from + 1))" "$server_log" |
    grep -E 'GPU worker: (merged index|merging|built the graph|merge for index)|merged on the GPU worker|built on the GPU worker|merge of index .* falls back|DETAIL:  (Shared memory segment|GNND, GGM|The incremental merge)' \
    >"$out/worker_merges.log" || true
fi

{
  echo "Command: \`$command\` (ROWS: $total x $dims, $loads loads of $chunk, $queries queries; server: $server)"
  echo
  echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')${gpu:+, $gpu}; date $(date -u +%Y-%m-%d)"
  echo
  if [ "${MERGE_BENCH_DATA:-}" = overlapping ]; then
    shape="16 overlapping clusters (centers within +-0.5), 64-dimensional latent subspaces"
  else
    shape="64 clusters, 12-dimensional latent subspaces"
  fi
  echo "Data: synthetic clustered (test/support/clustered_vectors.py: $shape, noise 0.02; each load drawn with its own cluster weights; float32, loaded by bench/merge_bench_data.py with binary COPY), L2, default index options; ground truth exact (float64)."
  if [ -s "$out/worker_merges.log" ]; then
    echo
    echo "The GPU worker built and merged (its LOG lines at the end): the CPU seconds in the tables count the session's backend only, not the worker's computation."
  fi
  echo
  echo "| | fresh CREATE INDEX on $total | $((base_chunks * chunk)) + $loads merges |"
  echo "|---|---|---|"
  echo "| build / base build s | $fresh_build | $base_build |"
  echo "| build CPU s (backend, all threads) | $fresh_cpu | |"
  echo "| recall@10 at the end, ef_search 64 | $fresh_recall | $inc_recall (gap $recall_gap) |"
  echo "| recall@10 at the end, ef_search 10 | $fresh_recall_low | $inc_recall_low (gap $recall_gap_low) |"
  if [ "$worker" = t ]; then
    echo "| the same, searched by the session through the pages (tsdg.device = cpu), ef_search 64 / 10 | $fresh_recall_cpu | $inc_recall_cpu |"
    echo "| the worker held the graph, after the statement returned | ${fresh_resident_s} s | (per merge below) |"
  fi
  echo "| index size | $(numfmt --to=iec "$fresh_size") | ${info##*size } |"
  echo "| largest merge / fresh build | | $max_ratio |"
  echo "| largest merge / fresh build, CPU time | | $max_cpu_ratio |"
  echo "| just-inserted rows not found first | | $misses_total of $probes_total probes |"
  echo "| one session's search, ms a query (LIMIT 10, best of 5 x $queries), with the last merge's $unreached_before unreached rows / after a merge of one more row ($unreached_after) | | $search_before / $search_after |"
  echo
  echo "$table"
  echo
  echo "End state: $info"
  echo
  echo "Merge phases (DEBUG1 of each merge):"
  echo
  sed 's/^/    /' "$out/merge_phases.log" 2>/dev/null
  if [ -s "$out/worker_merges.log" ]; then
    echo
    echo "The GPU worker's builds and merges (server log; the worker's split of each merge, and the session's time from the request to the answer):"
    echo
    sed -E 's/^[0-9-]+ ([0-9:.]+) [A-Z]+ \[[0-9]+\] /    \1 /' "$out/worker_merges.log"
  fi
  echo
  echo "Data generation and loading (all chunks, ground truth included): ${data_s}s; whole run: $(elapsed "$bench_start" "$(now)")s."
} >"$out/merge_bench.md"
cat "$out/merge_bench.md"
