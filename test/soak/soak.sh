#!/usr/bin/env bash
# The soak test: one server under many clients for a long while, searching,
# inserting, deleting, updating, merging and vacuuming in several databases
# (one of them also with pgvector's HNSW index when pgvector is at hand),
# while databases are created, indexed and dropped under their own searches
# and the GPU worker, its supervisor and backends are killed with SIGKILL.
# Afterwards it checks that the server answers in every database, that every
# live row is the nearest neighbour of its own vector through each tsdg index
# (as the load left it, then again once every pending row is merged), that an
# ordered scan without LIMIT returns every row once, that the heap and its
# btree agree (amcheck), that the worker is ready again, and that the server
# log holds no crash nor internal error beyond the processes killed on purpose.
# Exits non-zero when a check fails. Not part of scripts/test.sh: it is long.
#
#   TSDG_PG_PREFIX=DIR bash test/soak/soak.sh [all|start|finish]
#
# all (default) runs the whole test. start sets up, starts the load (detached,
# so that it outlives the command) and returns after SOAK_START_SECONDS;
# finish waits for the load's end and checks: two commands, for machines that
# bound one command's time. TSDG_PG_PREFIX is a private PostgreSQL copy with
# pg_tsdg installed (as scripts/test.sh and scripts/gpu/on-device.sh make it);
# the test runs on a copy of it of its own, with pgvector added from
# SOAK_PGVECTOR (default .gpu/pgvector.tar.gz, made by
# test/soak/pack-pgvector.sh) or built from PGVECTOR_TARBALL; with neither,
# there is no HNSW table, said so.
# Settings: SOAK_SECONDS (load, default 120), SOAK_CLIENTS (pgbench clients
# over the three databases, default 12), SOAK_ROWS (rows of each database
# before the load, default 20000: enough for a navigating layer), SOAK_KILL_SECONDS (between kills, default
# 15), SOAK_SHARED_BUFFERS (default 256MB), SOAK_PG_CONF (postgresql.conf
# lines, one per line, e.g. "tsdg.worker_backend = cpu" where there is no
# GPU), SOAK_DIR (default /tmp/tsdg-soak), SOAK_PORT (default 5560, moved by
# TSDG_PORT_OFFSET), OUT (where the logs are copied, default SOAK_DIR/out).
source "$(dirname "$0")/../../scripts/common.sh"
set +e
cd "$TSDG_ROOT"

phase=${1:-all}
dir=${SOAK_DIR:-/tmp/tsdg-soak}
load=$TSDG_ROOT/test/soak/load
databases=(soak_1 soak_2 soak_3)

now() { date +%s; }
stage() { log "$(date -u +%T) $*"; }

# sql DB SQL...: one statement's rows, unaligned, or nothing on failure
sql() {
  local db=$1
  shift
  psql -X -At -q -v ON_ERROR_STOP=1 -d "$db" -c "$*" 2>>"$dir/psql_errors.log"
}

wait_ready() {
  local deadline=$(( $(now) + ${1:-120} ))
  until pg_isready -q -d postgres; do
    [ "$(now)" -lt "$deadline" ] || return 1
    sleep 1
  done
}

worker_state() { sql postgres "SELECT state FROM tsdg_gpu_status()"; }

wait_worker() {
  local deadline=$(( $(now) + ${1:-180} )) state
  while :; do
    state=$(worker_state)
    case $state in ready|"no gpu"|disabled) echo "$state"; return 0 ;; esac
    [ "$(now)" -lt "$deadline" ] || { echo "${state:-no answer}"; return 1; }
    sleep 1
  done
}

# The server: a copy of TSDG_PG_PREFIX's PostgreSQL with pgvector added.
make_install() {
  local from=${TSDG_PG_PREFIX:?TSDG_PG_PREFIX names the PostgreSQL copy pg_tsdg is installed in}
  local pg=$dir/pg pack=${SOAK_PGVECTOR:-$TSDG_ROOT/.gpu/pgvector.tar.gz}
  [ -f "$from/usr/lib/postgresql/$PG_MAJOR/lib/pg_tsdg.so" ] ||
    { echo "no pg_tsdg.so in $from: build and install first" >&2; return 1; }
  mkdir -p "$pg/usr/lib/postgresql" "$pg/usr/share/postgresql"
  cp -a "$from/usr/lib/postgresql/$PG_MAJOR" "$pg/usr/lib/postgresql/"
  cp -a "$from/usr/share/postgresql/$PG_MAJOR" "$pg/usr/share/postgresql/"
  if [ ! -f "$pack" ] && [ -n "${PGVECTOR_TARBALL:-}" ]; then
    pack=$dir/pgvector.tar.gz
    bash "$TSDG_ROOT/test/soak/pack-pgvector.sh" "$pack" >"$dir/pgvector_build.log" 2>&1 ||
      { cat "$dir/pgvector_build.log" >&2; return 1; }
  fi
  if [ -f "$pack" ]; then
    # pgvector's extension "vector" replaces pg_tsdg's own, as make install
    # would leave it: pg_tsdg then works on pgvector's type
    rm -f "$pg/usr/share/postgresql/$PG_MAJOR/extension/vector.control" \
      "$pg"/usr/share/postgresql/$PG_MAJOR/extension/vector--*+tsdg.sql
    tar xzf "$pack" -C "$pg"
    echo yes >"$dir/pgvector"
  else
    echo "note: neither SOAK_PGVECTOR ($pack) nor PGVECTOR_TARBALL: no HNSW table" >&2
    echo no >"$dir/pgvector"
  fi
  chmod -R a+rX "$pg"
}

use_install() {
  PGBIN=$dir/pg/usr/lib/postgresql/$PG_MAJOR/bin
  export PATH=$PGBIN:$PATH
  export PGHOST=$dir/cluster PGPORT=$(( ${SOAK_PORT:-5560} + TSDG_PORT_OFFSET )) PGUSER=postgres
}

# the load of an earlier run in SOAK_DIR, if it still runs (a session of its own)
stop_load() {
  local pid
  pid=$(cat "$dir/load.pid" 2>/dev/null) || return 0
  kill -- -"$pid" 2>/dev/null
  rm -f "$dir/load.pid"
}

setup() {
  stop_load
  if [ -f "$dir/cluster/data/postmaster.pid" ]; then
    use_install
    stop_cluster "$dir/cluster"
  fi
  rm -rf "$dir"
  mkdir -p "$dir/pgbench" "$OUT"
  chmod 755 "$dir"
  make_install || return 1
  use_install

  local dsm_type conf=()
  dsm_type=$(shared_memory_type)
  [ -z "${SOAK_PG_CONF:-}" ] || mapfile -t conf <<<"$SOAK_PG_CONF"
  start_cluster "$dir/cluster" "${SOAK_PORT:-5560}" \
    "dynamic_shared_memory_type = $dsm_type" \
    "max_connections = $(( SOAK_CLIENTS + 60 ))" \
    "shared_buffers = ${SOAK_SHARED_BUFFERS:-256MB}" \
    "log_line_prefix = '%m [%p] %e %d: '" \
    "autovacuum_naptime = 5s" "autovacuum_max_workers = 4" \
    "jit = off" "max_wal_size = 8GB" "${conf[@]}" || return 1
  use_install

  sql postgres "CREATE EXTENSION pg_tsdg CASCADE" >/dev/null || return 1
  echo "worker: $(wait_worker)"
  sql postgres "SELECT state, device FROM tsdg_gpu_status()"

  stage "three databases of $SOAK_ROWS rows each"
  local db pids=()
  for db in "${databases[@]}"; do
    (
      createdb "$db" &&
      psql -X -q -v ON_ERROR_STOP=1 -v rows="$SOAK_ROWS" -d "$db" -f test/soak/schema.sql >/dev/null &&
      case $db in
        soak_2) sql "$db" "CREATE INDEX items_cos_idx ON items USING tsdg (v vector_cosine_ops) WITH (degree = 24)" ;;
        soak_3) if [ "$(cat "$dir/pgvector")" = yes ]; then
                  sql "$db" "CREATE TABLE items_hnsw (id bigserial PRIMARY KEY, c int NOT NULL, v vector(64) NOT NULL);
                    INSERT INTO items_hnsw (c, v) SELECT c, v FROM items;
                    CREATE INDEX items_hnsw_idx ON items_hnsw USING hnsw (v vector_l2_ops)"
                fi ;;
      esac
    ) &
    pids+=($!)
  done
  local pid failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" -eq 0 ] || { echo "FAIL: setting up the databases"; cat "$dir/psql_errors.log"; return 1; }
  sql soak_3 "SELECT extversion FROM pg_extension WHERE extname = 'vector'" | sed 's/^/extension vector /'
  for db in "${databases[@]}"; do
    echo "$db: $(sql "$db" "SELECT count(*) FROM items") rows, indexes: $(sql "$db" \
      "SELECT string_agg(indexrelid::regclass || ' ' || am.amname, ', ') FROM pg_index
         JOIN pg_class c ON c.oid = indexrelid JOIN pg_am am ON am.oid = c.relam
         WHERE indrelid IN ('items'::regclass, to_regclass('items_hnsw')) AND am.amname <> 'btree'")"
  done

  cat >"$dir/state.sh" <<EOF
SOAK_END=$(( $(now) + SOAK_SECONDS ))
SOAK_SECONDS=$SOAK_SECONDS
SOAK_CLIENTS=$SOAK_CLIENTS
SOAK_ROWS=$SOAK_ROWS
SOAK_KILL_SECONDS=$SOAK_KILL_SECONDS
EOF
}

# bench_loop DB CLIENTS SCRIPT@WEIGHT...: pgbench until the end, started again
# after each crash restart (every session is lost) and at least every minute
# (pgbench drops a client at its first error)
bench_loop() {
  local db=$1 clients=$2 round=0 left
  shift 2
  local scripts=() s
  for s in "$@"; do scripts+=(-f "$load/$s"); done
  while left=$(( SOAK_END - $(now) )); [ "$left" -gt 2 ]; do
    round=$((round + 1))
    [ "$left" -le 60 ] || left=60
    pgbench -n -c "$clients" -j $(( clients < 4 ? clients : 4 )) -T "$left" "${scripts[@]}" "$db" \
      >"$dir/pgbench/$db.$round.log" 2>&1
    wait_ready 60 || sleep 1
  done
}

# maintenance_loop DB: explicit merges, VACUUMs and, where there is a second
# index, REINDEX CONCURRENTLY, beside autovacuum and the clients' merges
maintenance_loop() {
  local db=$1 i=0 statement
  while [ "$(now)" -lt "$SOAK_END" ]; do
    sleep 5
    i=$((i + 1))
    case $((i % 4)) in
      0) statement="VACUUM items" ;;
      1) statement="SELECT tsdg_merge('items_v_idx')" ;;
      2) statement="VACUUM (ANALYZE) items" ;;
      3) if [ "$db" = soak_2 ]; then statement="REINDEX INDEX CONCURRENTLY items_cos_idx"
         else statement="SELECT tsdg_merge('items_v_idx')"; fi ;;
    esac
    echo "$(date -u +%T) $db: $statement" >>"$dir/maintenance.log"
    psql -X -q -d "$db" -c "$statement" >>"$dir/maintenance.log" 2>&1
  done
}

# Databases made, filled, indexed and searched, then dropped WITH (FORCE)
# under their searches, so that the worker holds indexes of a database that
# goes away.
churn_loop() {
  local n=0 db bench
  while [ $(( SOAK_END - $(now) )) -gt 30 ]; do
    n=$((n + 1))
    db=soak_churn_$n
    if createdb "$db" 2>>"$dir/churn.log" &&
       psql -X -q -v ON_ERROR_STOP=1 -v rows=$(( SOAK_ROWS / 4 )) -d "$db" -f test/soak/schema.sql \
         >>"$dir/churn.log" 2>&1; then
      pgbench -n -c 4 -j 2 -T 10 -f "$load/search.sql" -f "$load/batch.sql" "$db" \
        >"$dir/pgbench/$db.log" 2>&1 &
      bench=$!
      sleep 4
      if sql postgres "DROP DATABASE $db WITH (FORCE)"; then echo "$db dropped" >>"$dir/churn.log"; fi
      wait "$bench"
    fi
    wait_ready 120
  done
}

# Every SOAK_KILL_SECONDS a SIGKILL: mostly to the GPU worker (the cluster
# goes on), every third to a backend in a query and every sixth to the
# worker's supervisor (both restart the cluster). The last tenth of the load
# has none, so that the end is reached running.
kill_loop() {
  local k=0 what pid quiet=$(( SOAK_END - SOAK_SECONDS / 10 )) next
  next=$(( $(now) + SOAK_KILL_SECONDS ))
  while [ "$next" -lt "$quiet" ]; do
    sleep $(( next - $(now) > 0 ? next - $(now) : 0 ))
    next=$(( next + SOAK_KILL_SECONDS ))
    k=$((k + 1))
    case $((k % 6)) in
      0) what=supervisor; pid=$(sql postgres "SELECT supervisor_pid FROM tsdg_gpu_status()") ;;
      3) what=backend
         pid=$(sql postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
           AND datname LIKE 'soak%' AND state = 'active' AND pid <> pg_backend_pid()
           ORDER BY random() LIMIT 1") ;;
      *) what=worker; pid=$(sql postgres "SELECT worker_pid FROM tsdg_gpu_status()") ;;
    esac
    if [ -n "$pid" ] && [ "$pid" -gt 0 ] && kill -9 "$pid" 2>/dev/null; then
      echo "$(now) $pid $what" >>"$dir/kills.log"
    fi
    [ "$what" = worker ] || wait_ready 120
  done
}

run_load() {
  source "$dir/state.sh"
  use_install
  : >"$dir/kills.log"
  local per_db=$(( SOAK_CLIENTS / 3 ))
  [ "$per_db" -gt 0 ] || per_db=1
  local common=(search.sql@55 filtered.sql@5 insert.sql@12 delete.sql@5 update.sql@6 batch.sql@3 merge.sql@1)
  bench_loop soak_1 "$per_db" "${common[@]}" &
  bench_loop soak_2 "$per_db" "${common[@]}" search_cosine.sql@10 &
  if [ "$(cat "$dir/pgvector")" = yes ]; then
    bench_loop soak_3 "$per_db" "${common[@]}" search_hnsw.sql@10 insert_hnsw.sql@3 &
  else
    bench_loop soak_3 "$per_db" "${common[@]}" &
  fi
  local db
  for db in "${databases[@]}"; do maintenance_loop "$db" & done
  churn_loop &
  kill_loop &
  wait
  now >"$dir/load.done"
}

start_load() {
  rm -f "$dir/load.done"
  # a session of its own: it outlives the command that started it
  setsid bash "$TSDG_ROOT/test/soak/soak.sh" load </dev/null >"$dir/load.log" 2>&1 &
  echo $! >"$dir/load.pid"
  echo "load started for $SOAK_SECONDS s: $SOAK_CLIENTS clients, kills every $SOAK_KILL_SECONDS s"
}

progress() {
  echo "$(date -u +%T) kills: $(wc -l <"$dir/kills.log" 2>/dev/null || echo 0)," \
    "restarts: $(grep -c 'reinitializing' "$dir/cluster/server.log")," \
    "churned databases: $(grep -c dropped "$dir/churn.log" 2>/dev/null || echo 0)," \
    "worker: $(worker_state)"
}

# wait_load [UNTIL]: until the load ends (or the time UNTIL); 0 when it ended
wait_load() {
  local until=${1:-$(( SOAK_END + 300 ))} next=$(( $(now) + 30 ))
  while [ ! -f "$dir/load.done" ]; do
    [ "$(now)" -lt "$until" ] || return 1
    sleep 2
    if [ "$(now)" -ge "$next" ]; then progress; next=$(( $(now) + 30 )); fi
  done
}

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# self_found DB INDEX OP: every row of the table is the first answer of an
# index scan for its own vector; in parallel over the id's residues
self_found() {
  local db=$1 index=$2 op=$3 jobs=${SOAK_CHECK_JOBS:-$(nproc)} p
  local plan
  plan=$(sql "$db" "SET enable_seqscan = off; EXPLAIN (COSTS OFF)
    SELECT i.id FROM items i, LATERAL (SELECT j.id FROM items j ORDER BY j.v $op i.v LIMIT 1) f")
  if ! grep -q "Index Scan using $index " <<<"$plan"; then
    fail "$db: the self search does not use $index: $plan"
    return
  fi
  local pids=()
  for p in $(seq 0 $((jobs - 1))); do
    sql "$db" "SET enable_seqscan = off;
      SELECT count(*) FILTER (WHERE f.id IS DISTINCT FROM i.id), count(*),
        coalesce(array_to_string((array_agg(i.id ORDER BY i.id)
          FILTER (WHERE f.id IS DISTINCT FROM i.id))[1:5], ' '), '')
      FROM items i LEFT JOIN LATERAL (SELECT j.id FROM items j ORDER BY j.v $op i.v LIMIT 1) f ON true
      WHERE i.id % $jobs = $p" >"$dir/self.$p" &
    pids+=($!)
  done
  wait "${pids[@]}"
  local missed=0 rows=0 examples="" m r e id
  for p in $(seq 0 $((jobs - 1))); do
    IFS='|' read -r m r e <"$dir/self.$p"
    if [ -z "$r" ]; then fail "$db $index: the self search failed"; return; fi
    missed=$((missed + m)); rows=$((rows + r)); examples="$examples $e"
  done
  echo "$db $index ($op): $((rows - missed)) of $rows live rows found by their own vector"
  [ "$missed" -eq 0 ] && return
  fail "$db $index: $missed rows not found by their own vector at the default tsdg.ef_search"
  # a row the graph holds but a search of the default width misses, or one
  # the index lost
  for id in $examples; do
    echo "  id $id: first answer $(sql "$db" "SET enable_seqscan = off; SELECT j.id FROM items j
      ORDER BY j.v $op (SELECT v FROM items WHERE id = $id) LIMIT 1"), at tsdg.ef_search 1000:" \
      "$(sql "$db" "SET enable_seqscan = off; SET tsdg.ef_search = 1000; SELECT j.id FROM items j
      ORDER BY j.v $op (SELECT v FROM items WHERE id = $id) LIMIT 1")"
  done
}

# every row once through an ordered index scan without LIMIT
full_scan() {
  local db=$1 index=$2 op=$3 plan counts rows
  plan=$(sql "$db" "SET enable_seqscan = off; EXPLAIN (COSTS OFF)
    SELECT id FROM items ORDER BY v $op (SELECT v FROM queries WHERE qid = 1)")
  if ! grep -q "Index Scan using $index " <<<"$plan"; then
    fail "$db: the ordered scan does not use $index: $plan"
    return
  fi
  counts=$(sql "$db" "SET enable_seqscan = off; SELECT count(*) || ' ' || count(DISTINCT id)
    FROM (SELECT id FROM items ORDER BY v $op (SELECT v FROM queries WHERE qid = 1)) s")
  rows=$(sql "$db" "SELECT count(*) FROM items")
  echo "$db $index: an ordered scan without LIMIT returned $counts (rows, distinct) of $rows"
  [ "$counts" = "$rows $rows" ] || fail "$db $index: the ordered scan returned $counts, not $rows rows once each"
}

check_indexes() {
  local db
  for db in "${databases[@]}"; do
    self_found "$db" items_v_idx '<->'
    [ "$db" != soak_2 ] || self_found "$db" items_cos_idx '<=>'
  done
}

# The server log: every process that died of a signal is one killed on
# purpose; no PANIC, assertion, sanitizer report or internal error.
check_log() {
  local server_log=$dir/cluster/server.log line pid unexpected=0
  while read -r line; do
    pid=$(sed -n 's/.*(PID \([0-9]*\)).*/\1/p' <<<"$line")
    if ! awk -v pid="$pid" '$2 == pid { found = 1 } END { exit !found }' "$dir/kills.log" ||
       ! grep -q 'signal 9' <<<"$line"; then
      echo "  $line"
      unexpected=$((unexpected + 1))
    fi
  done < <(grep -E 'terminated by (signal|exception)|exited with exit code ([2-9]|[1-9][0-9])|GPU worker .*exited with exit code' \
             "$server_log")
  [ "$unexpected" -eq 0 ] || fail "$unexpected processes died that were not killed on purpose (above)"
  local crash
  crash=$(grep -E 'PANIC:|TRAP:|AddressSanitizer|runtime error:|stack smashing|double free' "$server_log" | head -20)
  [ -z "$crash" ] || fail "the server log holds a crash: $crash"
  echo "errors in the server log by SQLSTATE:"
  grep -E '^[^ ]+ [^ ]+ [^ ]+ \[[0-9]+\] [0-9A-Z]{5} [^ ]*: ERROR:' "$server_log" |
    awk '{ print $5 }' | sort | uniq -c | sort -rn | sed 's/^/  /'
  local internal
  internal=$(grep -E '\] XX[0-9A-Z]{3} [^ ]*: (ERROR|FATAL)' "$server_log" | head -20)
  [ -z "$internal" ] || fail "internal errors in the server log: $internal"
  local restarts ready
  restarts=$(grep -c 'all server processes terminated; reinitializing' "$server_log")
  ready=$(grep -c 'database system is ready to accept connections' "$server_log")
  echo "restarts: $restarts, each back to accepting connections: $ready times in all; killed:" \
    "$(awk '{ print $3 }' "$dir/kills.log" | sort | uniq -c | tr '\n' ' ')"
  [ "$ready" -gt "$restarts" ] || fail "the server did not come back after each restart"
}

summary() {
  local total=0 aborted=0 n f
  for f in "$dir"/pgbench/soak_[0-9]*.log; do
    n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$f")
    total=$((total + ${n:-0}))
  done
  aborted=$(cat "$dir"/pgbench/soak_[0-9]*.log | grep -c 'aborted in command')
  [ "$total" -gt 0 ] || fail "no pgbench transaction was completed"
  echo "pgbench: $total transactions in the three databases over $SOAK_SECONDS s" \
    "($(ls "$dir"/pgbench/soak_[0-9]*.log | wc -l) runs), $aborted clients dropped at an error"
  echo "errors the clients saw, by message:"
  cat "$dir"/pgbench/*.log | sed -n 's/^pgbench: error: client [0-9]* //p' |
    sed 's/[0-9]\+/N/g' | sort | uniq -c | sort -rn | head -15 | sed 's/^/  /'
  echo "churned databases: $(grep -c dropped "$dir/churn.log" 2>/dev/null || echo 0)"
}

finish() {
  source "$dir/state.sh"
  use_install
  stage "waiting for the load to end ($(( SOAK_END - $(now) )) s left)"
  wait_load || fail "the load did not end in time"
  stop_load
  wait_ready 180 || { fail "the server does not answer"; collect; return; }
  local state
  state=$(wait_worker 300) || fail "the worker is not ready again ($state)"
  echo "worker: $state"
  sql postgres "SELECT string_agg(quote_ident(datname), ' ') FROM pg_database WHERE datname LIKE 'soak_churn%'" |
    tr ' ' '\n' | while read -r db; do [ -z "$db" ] || sql postgres "DROP DATABASE $db WITH (FORCE)"; done

  stage "checks on the indexes as the load left them"
  local db
  for db in "${databases[@]}"; do
    sql "$db" "SELECT 'pending ' || pending || ', deleted ' || deleted || ', unreached ' || unreached
      || ', merges ' || merges || ', layer nodes ' || layer_nodes FROM tsdg_index_info('items_v_idx')" |
      sed "s/^/$db: /"
  done
  check_indexes
  for db in "${databases[@]}"; do full_scan "$db" items_v_idx '<->'; done

  stage "checks after merging every pending row"
  for db in "${databases[@]}"; do
    sql "$db" "SELECT tsdg_merge('items_v_idx')" >/dev/null || fail "$db: tsdg_merge failed"
    [ "$db" != soak_2 ] || sql "$db" "SELECT tsdg_merge('items_cos_idx')" >/dev/null ||
      fail "$db: tsdg_merge of the cosine index failed"
    sql "$db" "VACUUM items" || fail "$db: VACUUM failed"
    sql "$db" "SELECT 'pending ' || pending || ', deleted ' || deleted || ', unreached ' || unreached
      || ', layer nodes ' || layer_nodes FROM tsdg_index_info('items_v_idx')" | sed "s/^/$db: /"
  done
  check_indexes

  stage "the heap and its btree, pgvector's index, the server"
  for db in "${databases[@]}"; do
    sql "$db" "SELECT bt_index_check('items_pkey', true)" >/dev/null ||
      fail "$db: amcheck found the heap and items_pkey apart"
  done
  if [ "$(cat "$dir/pgvector")" = yes ]; then
    local hnsw
    hnsw=$(sql soak_3 "SELECT count(*) FROM (SELECT id FROM items_hnsw
      ORDER BY v <-> (SELECT v FROM queries WHERE qid = 1) LIMIT 10) s")
    echo "soak_3 items_hnsw_idx: $hnsw of 10 rows for a query"
    [ "$hnsw" = 10 ] || fail "pgvector's HNSW index does not answer"
  fi
  for db in postgres "${databases[@]}"; do
    [ "$(sql "$db" "SELECT 1")" = 1 ] || fail "the server does not answer in $db"
  done
  check_log
  summary
  collect
  [ -n "${SOAK_KEEP:-}" ] || stop_cluster "$dir/cluster"
}

collect() {
  mkdir -p "$OUT"
  gzip -c "$dir/cluster/server.log" >"$OUT/server.log.gz" 2>/dev/null
  tar czf "$OUT/soak_logs.tar.gz" -C "$dir" pgbench kills.log maintenance.log churn.log load.log \
    psql_errors.log 2>/dev/null
}

export SOAK_SECONDS=${SOAK_SECONDS:-120} SOAK_CLIENTS=${SOAK_CLIENTS:-12} SOAK_ROWS=${SOAK_ROWS:-20000}
export SOAK_KILL_SECONDS=${SOAK_KILL_SECONDS:-15}
OUT=${OUT:-$dir/out}
case $phase in
  load) run_load; exit 0 ;;
  all|start)
    mkdir -p "$OUT"
    exec > >(tee "$OUT/soak_$phase.log") 2>&1
    began=$(now)
    stage "setup"
    setup || { echo "FAIL: setup"; exit 1; }
    source "$dir/state.sh"
    start_load
    if [ "$phase" = start ]; then
      wait_load $(( began + ${SOAK_START_SECONDS:-540} ))
      progress
      echo "the load goes on for $(( SOAK_END - $(now) )) s: run the finish phase next"
      exit 0
    fi ;;
  finish)
    mkdir -p "$OUT"
    exec > >(tee "$OUT/soak_finish.log") 2>&1 ;;
  *) echo "usage: $0 [all|start|finish]" >&2; exit 2 ;;
esac
finish
if [ "$failures" -eq 0 ]; then log "soak test passed"; else log "soak test FAILED: $failures checks"; fi
[ "$failures" -eq 0 ]
