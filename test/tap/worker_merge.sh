#!/usr/bin/env bash
# tsdg_merge() through the GPU worker: the session hands the old graph and
# the pending rows to the worker in a shared memory segment and writes the
# merged graph it gets back. Two tables with the same rows and loads, one
# merged by the worker, one in the session (tsdg.device = cpu): recall@10
# after the merges within 0.01 of each other, every row of the last load
# found first through the index, and a row inserted just before a merge
# found first after it, and every row of a load merged at a narrow
# tsdg.ef_search found first at that ef; a merge of a graph the worker built or merged takes
# the old rows and lists from the worker's copy, and the worker keeps the
# merged graph, so the first search after a merge ships no index. A merge
# cancelled while the worker computes it
# stops the worker's computation; a worker killed (SIGKILL) during a merge
# leaves the merge to the session, which completes it on the CPU with a
# correct index; a worker killed during its summary of the merged graph
# leaves the summary to the session; the restarted worker merges an index
# with deleted nodes.
# Runs the worker with the core's CPU backend (any machine)
# unless TSDG_WORKER_BACKEND says otherwise.
# Usage: worker_merge.sh WORKDIR (starts its own cluster on port 54410).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_merge
port=54410
dims=32
base_rows=${TSDG_MERGE_BASE_ROWS:-20000}
load_rows=${TSDG_MERGE_LOAD_ROWS:-2000}
start_worker_cluster "maintenance_work_mem = '512MB'"
# the server log after its first $1 lines
log_lines() { tail -n +"$(($1 + 1))" "$dir/server.log"; }
# whether the server log from line $1 on has a line matching $2 (reads it
# whole: grep -q would leave tail a broken pipe, which pipefail counts)
logged() { log_lines "$1" | grep -c -- "$2" >/dev/null; }
py=$(numpy_python)
gen="$(dirname "$0")/../support/clustered_vectors.py"
status() { sql -At -c "SELECT $1 FROM tsdg_gpu_status()"; }

# loads rows [$2, $2 + $3) of the data (seed $4) into table $1
load() {
  "$py" "$gen" "$3" "$dims" "$4" | awk -F'\t' -v first="$2" '{ printf "%d\t%s\n", $1 - 1 + first, $2 }' |
    sql -c "COPY $1 FROM STDIN"
}
# merges index $1 through the worker ($2 = worker) or in the session ($2 = cpu),
# with tsdg.merge_knn_lag $3 (default 0.5)
merge() {
  local from device
  from=$(wc -l < "$dir/server.log")
  device=$( [ "$2" = worker ] && echo auto || echo cpu )
  [ "$(sql -At -c "SET tsdg.device = $device" -c "SET log_min_messages = debug1" \
       -c "SET tsdg.merge_knn_lag = ${3:-0.5}" -c "SELECT tsdg_merge('$1')")" -gt 0 ] ||
    fail "tsdg_merge('$1') merged no rows"
  if [ "$2" = worker ]; then
    logged "$from" "tsdg index \"$1\" merged on the GPU worker" ||
      fail "$1 was not merged by the worker"
    logged "$from" "pg_tsdg GPU worker: merged index" ||
      fail "the worker did not log the merge of $1"
  elif logged "$from" "merged on the GPU worker"; then
    fail "$1 was merged by the worker under tsdg.device = cpu"
  fi
}
# recall@10 of the index on table $1 over the queries
recall() {
  sql -At -c "SET enable_seqscan = off; SET tsdg.device = cpu;
    SELECT round(avg(hits) / 10, 4) FROM (
      SELECT (SELECT count(*) FROM (SELECT t.id FROM $1 t ORDER BY t.v <-> q.v LIMIT 10) a
              WHERE a.id = ANY (q.truth)) AS hits FROM queries q) s"
}
# recall@10 of the indexes on tables $1 ($2: what it is) and $3 ($4) within
# 0.01 of each other ($5: when); leaves the first in first_recall
recall_close() {
  local second
  first_recall=$(recall "$1")
  second=$(recall "$3")
  echo "recall@10 $5: $first_recall ($2), $second ($4)"
  awk -v a="$first_recall" -v b="$second" 'BEGIN { d = a - b; exit !(d <= 0.01 && d >= -0.01) }' ||
    fail "recall@10 $5: $first_recall ($2) is not within 0.01 of $second ($4)"
}
# the exact top 10 of every query over items
set_truth() {
  sql -c "SET max_parallel_workers_per_gather = 0" \
      -c "UPDATE queries q SET truth = ARRAY(SELECT r.id FROM items r ORDER BY (r.v <-> q.v) + 0 LIMIT 10)"
}
# every row with an id in [$2, $3) of table $1 (every $5-th when given) finds
# itself first through the index; a graph search at the default ef misses a
# few rows' own vectors, in fresh builds too (docs/benchmarks.md), so the
# search here is wide enough that a miss means the row is not in the graph
finds_itself() {
  local missed
  missed=$(sql -At -c "SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 200;
    SELECT count(*) FROM (SELECT id, v FROM $1 WHERE id >= $2 AND id < $3 AND id % ${5:-1} = 0) p
    WHERE (SELECT t.id FROM $1 t ORDER BY t.v <-> p.v LIMIT 1) <> p.id")
  [ "$missed" = 0 ] || fail "$1: $missed rows of [$2, $3) do not find themselves first ($4)"
}

sql -c "CREATE EXTENSION pg_tsdg"
wait_for_worker_or_skip "$backend" || fail "the worker is not ready"

sql -c "CREATE TABLE items (id int, v vector($dims))" -c "CREATE TABLE queries (id int, v vector($dims), truth int[])"
load items 1 "$base_rows" 1
sql -c "CREATE TABLE items_cpu AS SELECT * FROM items" \
    -c "CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops)" \
    -c "SET tsdg.device = cpu" -c "CREATE INDEX items_cpu_idx ON items_cpu USING tsdg (v vector_l2_ops)"

# a search of items through the worker (near row $1): how many index images
# the sessions shipped to the worker for it
shipped_for_search() {
  local loads
  loads=$(status index_loads)
  sql -At -c "SET enable_seqscan = off; SET tsdg.device = gpu;
    SELECT count(*) FROM (SELECT t.id FROM items t ORDER BY t.v <-> (SELECT v FROM items WHERE id = $1) LIMIT 10) a" >/dev/null
  echo $(( $(status index_loads) - loads ))
}

# 1. Two loads, each merged by the worker into items and in the session into items_cpu.
# The worker keeps the graph it built and each graph it merged, its k-NN
# lists included: each merge leaves the old rows and lists to its copy
# instead of reading them, and the search after each merge finds the merged
# graph on the worker. The first merge leaves the k-NN pages as they were
# (the worker has the lists), the second (tsdg.merge_knn_lag = 0) writes them.
next=$((base_rows + 1))
first_merge=$(wc -l < "$dir/server.log")
for l in 1 2; do
  load items "$next" "$load_rows" $((l + 1))
  sql -c "INSERT INTO items_cpu SELECT * FROM items WHERE id >= $next"
  from=$(wc -l < "$dir/server.log")
  merge items_idx worker "$([ "$l" = 1 ] && echo 0.5 || echo 0)"
  logged "$from" "merging $load_rows rows into the graph of $((next - 1)) rows .*the old graph from its copy" ||
    fail "merge $l read the old graph although the worker held it"
  if [ "$l" = 1 ]; then
    logged "$from" "k-NN pages kept as they were (the lists of $base_rows of $((next + load_rows - 1)) nodes)" ||
      fail "merge 1 did not leave the k-NN pages to the worker's lists"
    logged "$from" "the worker's own memory has the merged graph's rows and k-NN lists" ||
      fail "merge 1's segment carried the old rows or the merged k-NN lists the worker keeps itself"
    [ "$(sql -At -c "SELECT knn_lag FROM tsdg_index_info('items_idx')")" = "$load_rows" ] ||
      fail "tsdg_index_info does not show the $load_rows nodes past the k-NN pages"
  elif logged "$from" "k-NN pages kept"; then
    fail "merge 2 kept the k-NN pages under tsdg.merge_knn_lag = 0"
  elif ! logged "$from" "the worker's own memory has the merged graph's rows\."; then
    fail "merge 2's segment carried the old rows, or not the merged k-NN lists it writes out"
  else
    [ "$(sql -At -c "SELECT knn_lag FROM tsdg_index_info('items_idx')")" = 0 ] ||
      fail "tsdg_index_info shows a k-NN lag after merge 2 wrote the k-NN pages"
  fi
  [ "$(shipped_for_search "$next")" = 0 ] ||
    fail "the first search after merge $l shipped the index: the worker did not keep the merged graph"
  merge items_cpu_idx cpu
  next=$((next + load_rows))
done
[ "$(sql -At -c "SELECT pending FROM tsdg_index_info('items_idx')")" = 0 ] || fail "rows still pending after the merges"
# the session writes the merged k-NN lists while the worker diversifies, when
# the worker's progress poll (every 50 ms) sees it do so: the CPU worker takes
# longer than that here, a GPU may not
if logged "$first_merge" "k-NN pages written while the worker diversified"; then
  echo "the k-NN pages were written while the worker diversified"
elif [ "$backend" = cpu ]; then
  fail "no merge wrote its k-NN pages while the worker diversified"
fi
# a GPU merge puts its search lists in the segment batch by batch before it
# links the graph's components: parallel workers and the session write the
# list pages meanwhile, and those holding a list the linking changed again
# after the answer (the CPU worker merges as the session does, without that
# step, and publishes its lists with its answer: the same writers write them
# then); every 25th row, all clusters, found through the pages below
log_lines "$first_merge" | grep -o "[0-9]* of [0-9]* list pages written in [^;]* again after" | head -2
logged "$first_merge" "list pages written in .* by [1-9][0-9]* parallel workers and the session" ||
  fail "no merge had its list pages written by parallel workers"
if [ "$backend" = cuda ]; then
  logged "$first_merge" "list pages written in .* ([1-9][0-9]* before its answer" ||
    fail "no merge wrote list pages while the worker wrote its lists out"
fi
[ "$(sql -At -c "SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
     WHERE c->>'index' = 'items_idx'")" = 1 ] || fail "the worker still holds an older graph of items_idx after searches of the newer one"
"$py" "$gen" 100 "$dims" 99 | sql -c "COPY queries (id, v) FROM STDIN"
set_truth
recall_close items "merged by the worker" items_cpu "merged in the session" "after 2 merges"
awk -v a="$first_recall" 'BEGIN { exit !(a >= 0.9) }' || fail "recall@10 $first_recall after the merges"
finds_itself items $((next - load_rows)) "$next" "the last load, merged by the worker"
finds_itself items 1 "$next" "the graph merged by the worker" 25

# 2. A row inserted just before a merge is found first right after it.
sql -c "INSERT INTO items SELECT $next, v FROM queries WHERE id = 7"
merge items_idx worker
first=$(sql -At -c "SET enable_seqscan = off; SET tsdg.device = cpu;
  SELECT t.id FROM items t, queries q WHERE q.id = 7 ORDER BY t.v <-> q.v LIMIT 1")
[ "$first" = "$next" ] || fail "the row inserted before the merge comes back as $first, not $next"
next=$((next + 1))

# 2b. A load merged at a narrow tsdg.ef_search: the merge looks each row up
# by its own vector at that ef, repairs the graph for the rows those
# searches do not reach (the worker's walk and the pages'), and the rows
# still not reached are searched exactly from then on, so every row of the
# load is found first at that ef: through the worker, through the pages and
# in a batch.
load items "$next" "$load_rows" 5
from=$(wc -l < "$dir/server.log")
sql -At -c "SET tsdg.ef_search = 2" -c "SELECT tsdg_merge('items_idx')" >/dev/null
logged "$from" "are not reached by the walk for their own vector at ef 2 .*; [0-9]* lists given an edge" ||
  fail "the worker did not repair its graph for the merged rows its searches do not reach"
left=$(log_lines "$from" | grep -o "lists given an edge.*, then [0-9]* not reached by a search" |
  tail -1 | grep -o "then [0-9]*" | grep -o "[0-9]*")
[ "$(sql -At -c "SELECT unreached FROM tsdg_index_info('items_idx')")" = "$left" ] ||
  fail "the metapage does not list the $left rows the worker's repair left unreached"
for device in auto cpu; do
  missed=$(sql -At -c "SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 2;
    SELECT count(*) FROM (SELECT id, v FROM items WHERE id >= $next AND id < $((next + load_rows))) p
    WHERE (SELECT t.id FROM items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id")
  [ "$missed" = 0 ] ||
    fail "$missed rows of the load merged at ef 2 are not found first at ef 2 (tsdg.device = $device)"
done
missed=$(sql -At -c "SET tsdg.ef_search = 2;
  SELECT count(*) FROM tsdg_search_batch('items_idx',
    ARRAY(SELECT v FROM items WHERE id >= $next AND id < $((next + load_rows)) ORDER BY id), 1) b
  JOIN items t ON t.ctid = b.tid WHERE t.id <> b.query - 1 + $next")
[ "$missed" = 0 ] || fail "$missed rows of the load merged at ef 2 are not found first by a batch at ef 2"
next=$((next + load_rows))

# waits until the server log (from line $1) shows $2; false after 60 s
wait_for_log() {
  for _ in $(seq 1 6000); do
    logged "$1" "$2" && return 0
    sleep 0.01
  done
  return 1
}

# 3. A merge cancelled while the worker computes it: the worker stops it (or,
# when it answered first, the session stops writing), the pending rows stay,
# and the next merge goes through the worker again. (Larger loads from here on,
# so that the merges last long enough to be interrupted.)
load_rows=$((3 * load_rows))
load items "$next" "$load_rows" 4
next=$((next + load_rows))
from=$(wc -l < "$dir/server.log")
psql -X -q -c "SELECT tsdg_merge('items_idx')" >"$dir/cancelled.out" 2>&1 &
merge_session=$!
wait_for_log "$from" "pg_tsdg GPU worker: merging" || fail "the worker never started the merge to cancel"
sql -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT tsdg_merge%' AND pid <> pg_backend_pid()" >/dev/null
wait "$merge_session" && fail "the cancelled merge completed"
grep -q "canceling statement due to user request" "$dir/cancelled.out" || fail "the merge failed otherwise: $(cat "$dir/cancelled.out")"
# a GPU may finish the merge before it sees the cancel (it looks every 50
# ms): the session, cancelled while it waited, then drops the answer; the
# CPU worker is slow enough to be stopped
stopped="pg_tsdg GPU worker: merge for index [0-9/]* cancelled"
if [ "$backend" = cpu ]; then
  wait_for_log "$from" "$stopped" || fail "the worker did not stop the cancelled merge"
else
  wait_for_log "$from" "$stopped\|pg_tsdg GPU worker: merged index" ||
    fail "the worker neither stopped nor finished the cancelled merge"
  logged "$from" "$stopped" ||
    echo "cancel: the worker finished the merge before it saw the cancel; the session dropped it"
fi
wait_for_worker_or_skip "$backend" || fail "the worker is not ready after a cancelled merge"
[ "$(sql -At -c "SELECT pending FROM tsdg_index_info('items_idx')")" = "$load_rows" ] ||
  fail "the cancelled merge changed the pending rows"
merge items_idx worker
finds_itself items $((next - load_rows)) "$next" "merged after a cancelled merge"

# 4. The worker killed during a merge: the session merges on the CPU (or, when
# the worker answered first, writes its answer).
load items "$next" "$load_rows" 5
next=$((next + load_rows))
fallbacks=$(status fallbacks)
from=$(wc -l < "$dir/server.log")
sql -At -c "SET log_min_messages = debug1" -c "SELECT tsdg_merge('items_idx')" >"$dir/killed.out" 2>&1 &
merge_session=$!
wait_for_log "$from" "pg_tsdg GPU worker: merging" || fail "the worker never started the merge to kill"
kill -9 "$(status worker_pid)"
wait "$merge_session" || fail "the merge failed when the worker was killed: $(cat "$dir/killed.out")"
[ "$(cat "$dir/killed.out")" = "$load_rows" ] || fail "the merge after the kill returned $(cat "$dir/killed.out")"
# a GPU may have answered before the kill came: the session then finishes
# the merge without the worker (the entry points included)
if [ "$backend" != cpu ] && logged "$from" 'tsdg index "items_idx" merged on the GPU worker'; then
  echo "kill: the worker had answered, the session finished the merge without it"
else
  logged "$from" 'tsdg merge of index "items_idx" falls back to the CPU' ||
    fail "no LOG line of the merge's fallback"
  [ "$(status fallbacks)" -gt "$fallbacks" ] || fail "the fallback was not counted"
  # the merges since the second kept the k-NN pages: the session read them and
  # merged the nodes past them again
  logged "$from" "nodes past the stored k-NN lists merged again" ||
    fail "the merge on the CPU did not merge the nodes past the stored k-NN lists"
fi
[ "$(sql -At -c "SELECT pending FROM tsdg_index_info('items_idx')")" = 0 ] || fail "rows pending after the merge on the CPU"
[ "$(sql -At -c "SELECT rows FROM tsdg_index_info('items_idx')")" = "$(sql -At -c "SELECT count(*) FROM items")" ] ||
  fail "the index does not hold every row after the merge on the CPU"
finds_itself items $((next - load_rows)) "$next" "merged on the CPU after the worker was killed"
finds_itself items 1 1000 "old rows after the merge on the CPU"
echo "fallback: $(log_lines "$from" | grep -o 'falls back to the CPU.*' | head -1)"

# 4b. The worker killed during its summary of the merged graph, after its
# answer, while it looks the merged rows up and repairs its graph for those
# it does not reach (a wide ef makes that last): the session computes the
# summary with the pages' walk and writes again every list the worker's
# repair had marked (the worker marks a list before it writes it), so each
# row of the load is found first at the merging ef. A kill that comes after
# the summary leaves nothing to check: the load is merged again until one
# lands in it.
killed_in_summary=0
for attempt in 1 2 3; do
  wait_for_worker_or_skip "$backend" || fail "the worker did not come back"
  load items "$next" "$load_rows" $((20 + attempt))
  from=$(wc -l < "$dir/server.log")
  sql -At -c "SET log_min_messages = debug1" -c "SET tsdg.ef_search = 400" \
    -c "SELECT tsdg_merge('items_idx')" >"$dir/killed_summary.out" 2>&1 &
  merge_session=$!
  wait_for_log "$from" "pg_tsdg GPU worker: merged index" || fail "the worker never answered the merge"
  kill -9 "$(status worker_pid)"
  wait "$merge_session" || fail "the merge failed when the worker was killed in its summary: $(cat "$dir/killed_summary.out")"
  [ "$(cat "$dir/killed_summary.out")" = "$load_rows" ] ||
    fail "the merge with the worker killed in its summary returned $(cat "$dir/killed_summary.out")"
  missed=$(sql -At -c "SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 400;
    SELECT count(*) FROM (SELECT id, v FROM items WHERE id >= $next AND id < $((next + load_rows))) p
    WHERE (SELECT t.id FROM items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id")
  [ "$missed" = 0 ] || fail "$missed rows of a load whose worker was killed in its summary are not found first"
  next=$((next + load_rows))
  if logged "$from" "the worker's summary failed: computed here"; then
    killed_in_summary=1
    echo "killed in its summary (attempt $attempt): $(log_lines "$from" | grep -o "list pages of old nodes.*" | head -1)"
    break
  fi
  logged "$from" "pg_tsdg GPU worker: summary of the merged graph of index" ||
    fail "the worker neither finished its summary nor left it to the session"
  echo "attempt $attempt: the worker finished its summary before the kill"
done
[ "$killed_in_summary" = 1 ] || fail "no kill landed in the worker's summary in 3 attempts"
finds_itself items 1 "$next" "the graph after the worker was killed in its summary" 25

# 5. The restarted worker merges again, for VACUUM, with deleted nodes: the
# session sends the repaired k-NN lists with their distances and which lists
# it repaired, and the worker's graph leaves the deleted nodes out. The merge
# before it kept the k-NN pages, so the merge with deletes also merges the
# nodes past them again, and writes them; the merge after it reuses the region
# they leave.
wait_for_worker_or_skip "$backend" || fail "the worker did not come back"
load items "$next" 300 7
merge items_idx worker
next=$((next + 300))
sql -c "DELETE FROM items WHERE id % 10 = 3" -c "SET tsdg.merge_threshold = -1" -c "VACUUM items"
[ "$(sql -At -c "SELECT deleted > 0 FROM tsdg_index_info('items_idx')")" = t ] || fail "VACUUM marked no node deleted"
load items "$next" 500 6
# this merge is VACUUM's (past tsdg.merge_threshold), through the worker as well
from=$(wc -l < "$dir/server.log")
sql -c "SET tsdg.merge_threshold = 0" -c "SET tsdg.merge_scale_factor = 0" -c "SET log_min_messages = debug1" -c "VACUUM items"
logged "$from" 'tsdg index "items_idx" merged on the GPU worker' ||
  fail "VACUUM's merge did not go through the worker"
logged "$from" "nodes past the stored k-NN lists merged again" ||
  fail "the merge with deleted nodes did not merge the nodes past the stored k-NN lists"
logged "$from" "k-NN pages kept" && fail "the merge with deleted nodes kept the k-NN pages"
[ "$(sql -At -c "SELECT rows || '/' || deleted FROM tsdg_index_info('items_idx')")" = "$(sql -At -c "SELECT count(*) FROM items")/0" ] ||
  fail "after the merge with deleted nodes the index holds $(sql -At -c "SELECT rows || ' rows, ' || deleted || ' deleted' FROM tsdg_index_info('items_idx')") for $(sql -At -c "SELECT count(*) FROM items") rows"
finds_itself items "$next" $((next + 500)) "merged by the restarted worker after deletes"
finds_itself items 1 2000 "old rows after the merge that dropped deleted nodes"
next=$((next + 500))
load items "$next" 400 8
merge items_idx worker
finds_itself items "$next" $((next + 400)) "merged after the merge that wrote the k-NN pages again"
finds_itself items 1 2000 "old rows after the merge that reused the retired k-NN region"

# 6. After merges from k-NN pages that lagged, the graph is as good as a fresh build's.
sql -c "CREATE TABLE items_fresh AS SELECT * FROM items" \
    -c "SET tsdg.device = cpu" -c "CREATE INDEX items_fresh_idx ON items_fresh USING tsdg (v vector_l2_ops)"
set_truth
recall_close items "merged" items_fresh "fresh build" "at the end"
# 7. A temporary table's index merged through the worker: other backends
# cannot write its pages, so the session writes its list pages alone.
from=$(wc -l < "$dir/server.log")
missed=$(sql -At -c "SET log_min_messages = debug1" \
  -c "CREATE TEMP TABLE temp_items AS SELECT * FROM items WHERE id % 3 = 0" \
  -c "CREATE INDEX temp_items_idx ON temp_items USING tsdg (v vector_l2_ops)" \
  -c "INSERT INTO temp_items SELECT * FROM items WHERE id % 3 = 1" \
  -c "SELECT tsdg_merge('temp_items_idx')" \
  -c "SET enable_seqscan = off" -c "SET tsdg.device = cpu" -c "SET tsdg.ef_search = 200" \
  -c "SELECT count(*) FROM (SELECT id, v FROM temp_items WHERE id % 3 = 1) p
      WHERE (SELECT t.id FROM temp_items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id" | tail -1)
logged "$from" "tsdg index \"temp_items_idx\" merged on the GPU worker" ||
  fail "the temporary table's index was not merged by the worker"
logged "$from" "list pages written in .* by 0 parallel workers and the session" ||
  fail "parallel workers wrote list pages of a temporary table's index"
[ "$missed" = 0 ] || fail "$missed merged rows of the temporary table do not find themselves first"
echo "temporary table: merged by the worker, its list pages written by the session alone"
echo "worker_merge: all checks passed"
