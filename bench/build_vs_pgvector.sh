#!/usr/bin/env bash
# CREATE INDEX of pg_tsdg against pgvector's HNSW (m 16, ef_construction 64)
# on the same rows of one table, in one cluster, taking turns: tsdg, hnsw,
# tsdg, hnsw, ... so that both see the same load on a shared machine. Then
# recall@10 of both indexes at a few ef values against the exact answer of
# QUERIES rows (one session, LIMIT 10). Prints beside every build its CPU time
# (all processes that worked on it: the session and any parallel workers) and
# the load average, since wall times on a shared machine follow the load.
#
# usage: PGVECTOR_TARBALL=pgvector-0.8.6.tar.gz bench/build_vs_pgvector.sh ROWS.tsv QUERIES.tsv [TURNS]
#   ROWS.tsv, QUERIES.tsv: "id<TAB>[x1,...]" lines (bench/mnist_data.sh writes
#   MNIST's; test/support/subspace_clusters.py writes hard synthetic rows)
#   TURNS: builds of each index (default 2)
#   BENCH_TSDG_ALSO="samples = 32, ...": a third index, tsdg with these options,
#   built by the same turns (e.g. to compare options side by side)
# pg_tsdg is built and installed, with pgvector built from its release archive
# (its own default flags, as a user builds it), into a private copy of
# PostgreSQL (BENCH_PG_PREFIX, default /tmp/pg_tsdg_vs_pgvector); the cluster
# (port 54363 + TSDG_PORT_OFFSET, no preload: the build runs in the session on
# the CPU, as pgvector's does) lives in a temporary directory. Server settings
# are the defaults but maintenance_work_mem (BENCH_MWM, default 2GB: both
# builds fit in memory) and shared_buffers (1GB). pg_tsdg's account of where
# its builds spent their time (the server log) closes the report.
set -euo pipefail
rows_file=$(realpath "${1:?usage: bench/build_vs_pgvector.sh ROWS.tsv QUERIES.tsv [TURNS]}")
queries_file=$(realpath "${2:?usage: bench/build_vs_pgvector.sh ROWS.tsv QUERIES.tsv [TURNS]}")
turns=${3:-2}
tarball=$(realpath "${PGVECTOR_TARBALL:?PGVECTOR_TARBALL names the release archive of pgvector}")
export TSDG_PG_PREFIX=${BENCH_PG_PREFIX:-/tmp/pg_tsdg_vs_pgvector}
source "$(dirname "$0")/../scripts/common.sh"

build_and_install
sharedir=$TSDG_PG_PREFIX/usr/share/postgresql/$PG_MAJOR/extension
if ! grep -q "module_pathname = '\$libdir/vector'" "$sharedir/vector.control" 2>/dev/null; then
  log "building pgvector into $TSDG_PG_PREFIX"
  src=$(mktemp -d /tmp/pgvector_src.XXXXXX)
  tar xzf "$tarball" -C "$src"
  # pg_tsdg's own extension "vector" gives way to pgvector's
  rm -f "$sharedir/vector.control" "$sharedir"/vector--*+tsdg.sql
  make -s -C "$src"/pgvector-* -j2 PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config with_llvm=no
  make -s -C "$src"/pgvector-* install DESTDIR="$TSDG_PG_PREFIX" \
    PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config with_llvm=no >/dev/null
  rm -rf "$src"
fi

work=$(mktemp -d /tmp/tsdg_vs_pgvector.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
start_cluster "$work" 54363 "shared_preload_libraries = ''" "shared_buffers = '1GB'" \
  "maintenance_work_mem = '${BENCH_MWM:-2GB}'"
dims=$(tsv_dims "$rows_file")
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION vector" -c "CREATE EXTENSION pg_tsdg"
load_vector_tables "$work" "$rows_file" "$queries_file" truth

rows=$(psql -X -At -c "SELECT count(*) FROM items")
queries=$(psql -X -At -c "SELECT count(*) FROM queries")
/usr/bin/python3 - "$turns" "$dims" "$rows" "$queries" <<'PY'
import os, subprocess, sys, time
turns, dims, rows, queries = (int(a) for a in sys.argv[1:5])
indexes = {
    "tsdg": ("CREATE INDEX items_tsdg ON items USING tsdg (v vector_l2_ops)", "tsdg.ef_search"),
    "hnsw": ("CREATE INDEX items_hnsw ON items USING hnsw (v vector_l2_ops)"
             " WITH (m = 16, ef_construction = 64)", "hnsw.ef_search"),
}
if os.environ.get("BENCH_TSDG_ALSO"):
    indexes["tsdg_also"] = ("CREATE INDEX items_tsdg_also ON items USING tsdg (v vector_l2_ops) WITH (%s)"
                            % os.environ["BENCH_TSDG_ALSO"], "tsdg.ef_search")

def psql(sql):
    return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"], input=sql,
                          capture_output=True, text=True, check=True).stdout.strip()

def load():
    return "%.2f %.2f %.2f" % os.getloadavg()

print("%d rows x %d dims, %d queries; pgvector %s, pg_tsdg %s; no preload; maintenance_work_mem %s;"
      " max_parallel_maintenance_workers %s" % (
          rows, dims, queries, psql("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
          psql("SELECT extversion FROM pg_extension WHERE extname = 'pg_tsdg'"),
          psql("SHOW maintenance_work_mem"), psql("SHOW max_parallel_maintenance_workers")))
print()
# CPU seconds of a build: the session's own (all its threads) and those of
# the processes that exited meanwhile, which the postmaster reaped (pgvector's
# parallel build workers): user + system ticks from /proc, read by the server.
CPU_TICKS = """
CREATE FUNCTION pg_temp.ticks(pid int, first int) RETURNS bigint LANGUAGE sql AS $$
  SELECT split_part(s, ' ', first)::bigint + split_part(s, ' ', first + 1)::bigint
  FROM (SELECT regexp_replace(pg_read_file('/proc/' || pid || '/stat'), '^.*\\) ', 'x ') s) x $$;
CREATE FUNCTION pg_temp.cpu_ticks() RETURNS bigint LANGUAGE sql AS $$
  SELECT pg_temp.ticks(pg_backend_pid(), 13)
       + pg_temp.ticks(split_part(pg_read_file('postmaster.pid'), E'\\n', 1)::int, 15) $$;
"""

print("| turn | index | CREATE INDEX s | CPU s | load average before | size MB |")
print("|---|---|---|---|---|---|")
for turn in range(1, turns + 1):
    for name, (create, _) in indexes.items():
        psql("DROP INDEX IF EXISTS items_%s; CHECKPOINT;" % name)
        before = load()
        start = time.perf_counter()
        ticks = psql(CPU_TICKS + "SELECT pg_temp.cpu_ticks() AS before \\gset\n" + create + ";\n"
                     "SELECT pg_temp.cpu_ticks() - :before;").splitlines()[-1]
        seconds = time.perf_counter() - start
        size = int(psql("SELECT pg_relation_size('items_%s')" % name)) / 2**20
        print("| %d | %s | %.1f | %.1f | %s | %.1f |" % (turn, name, seconds, int(ticks) / 100.0, before, size),
              flush=True)

print()
print("| index | ef | recall@10 | ms a query (one session) |")
print("|---|---|---|---|")
for name, (_, setting) in indexes.items():
    others = "".join("DROP INDEX items_%s; " % n for n in indexes if n != name)
    for ef in (10, 40, 100, 200, 400):
        # the other indexes off the table for the plan: all answer the same ORDER BY
        out = psql(
            "BEGIN; %sSET enable_seqscan = off; SET %s = %d;\n"
            "SELECT avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0),"
            " 1000 * extract(epoch FROM clock_timestamp() - now()) / count(*)"
            " FROM truth t JOIN queries q ON q.id = t.qid,"
            " LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;\n"
            "ROLLBACK;" % (others, setting, ef))
        recall, ms = out.split("|")
        print("| %s | %d | %.3f | %.2f |" % (name, ef, float(recall), float(ms)), flush=True)
PY
echo
echo "pg_tsdg's own account of its builds (server log):"
grep -o 'tsdg index "items_tsdg[a-z_]*" built from.*' "$work/server.log" || true
