"""The measured work: loading a table, building an index while watching its progress,
a recall pass over the queries, and pgbench runs at a number of concurrent clients."""
import glob
import os
import re
import subprocess
import tempfile
import time

import numpy as np

from . import pg
from .progress import Progress

SEARCH_SQL = "SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM queries WHERE id = %s) LIMIT %d"


def create_tables(server, database, dim):
    server.query(database, """
        DROP TABLE IF EXISTS items, queries;
        CREATE TABLE items (id int4 NOT NULL, embedding vector(%d) NOT NULL);
        CREATE TABLE queries (id int4 PRIMARY KEY, v vector(%d) NOT NULL);
    """ % (dim, dim))


def table_rows(server, database):
    """(items rows, queries rows), or None when the tables are missing."""
    exists = server.value(database, "SELECT to_regclass('items') IS NOT NULL AND "
                                    "to_regclass('queries') IS NOT NULL")
    if exists != "t":
        return None
    row = server.query(database, "SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM queries)")[0]
    return int(row[0]), int(row[1])


def load(server, database, base, queries, copy_format):
    """COPY base rows (ids 0..n-1, the ground truth's row numbers) and queries (ids
    1..nq) into fresh tables; returns seconds spent on the base rows."""
    create_tables(server, database, base.shape[1])
    chunks = pg.copy_binary_chunks if copy_format == "binary" else pg.copy_text_chunks
    start = time.monotonic()
    server.copy_in(database, "items", copy_format, chunks(np.arange(base.shape[0]), base),
                   pg.copy_stream_size(copy_format, *base.shape), "COPY items (%s)" % copy_format)
    seconds = time.monotonic() - start
    server.copy_in(database, "queries", copy_format, chunks(np.arange(1, queries.shape[0] + 1), queries),
                   pg.copy_stream_size(copy_format, *queries.shape), "COPY queries")
    server.query(database, "VACUUM ANALYZE items; VACUUM ANALYZE queries;")
    return seconds


def build_index(server, database, method, maintenance_work_mem):
    """Runs the method's CREATE INDEX and polls pg_stat_progress_create_index from a
    second connection meanwhile; returns (seconds, bytes)."""
    server.query(database, "DROP INDEX IF EXISTS %s" % method.index_name)
    meter = Progress("CREATE INDEX (%s)" % method.name)
    build = server.start(database, method.index_sql + ";",
                         {"maintenance_work_mem": maintenance_work_mem})
    start = time.monotonic()
    while build.poll() is None:
        rows = server.query(database, """
            SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total
            FROM pg_stat_progress_create_index WHERE datname = current_database()""")
        if rows:
            phase, blocks_done, blocks_total, tuples_done, tuples_total = rows[0]
            detail = phase
            if tuples_total not in ("", "0"):
                detail += ", tuples %s/%s" % (tuples_done, tuples_total)
            if blocks_total not in ("", "0"):
                detail += ", blocks %s/%s" % (blocks_done, blocks_total)
            meter.update(None, detail)
        time.sleep(0.5)
    seconds = time.monotonic() - start
    err = build.stderr.read()
    if build.wait() != 0:
        raise pg.PgError("%s failed:\n%s" % (method.index_sql, err.strip()))
    meter.finish("built in %.1f s" % seconds)
    size = int(server.value(database, "SELECT pg_relation_size('%s')" % method.index_name))
    return seconds, size


def check_plan(server, database, method, settings):
    """Fails unless the benchmark query runs the way the method says: through its index,
    or as a sequential scan for the exact method. Returns the plan text."""
    plan = "\n".join(r[0] for r in server.query(
        database, "EXPLAIN (COSTS OFF) " + SEARCH_SQL % ("1", 10), _settings(method, settings)))
    wanted = ("Index Scan using %s" % method.index_name) if method.uses_index else "Seq Scan on items"
    if wanted not in plan:
        raise pg.PgError("%s: the benchmark query does not use %r:\n%s" % (method.name, wanted, plan))
    return plan


def recall_pass(server, database, method, settings, query_count, k):
    """{query row: [ids]} for queries 1..query_count, all in one session, and the
    session's queries per second."""
    sql = ("SELECT q.id, r.id FROM queries q CROSS JOIN LATERAL "
           "(SELECT i.id FROM items i ORDER BY i.embedding <-> q.v LIMIT %d) r "
           "WHERE q.id <= %d" % (k, query_count))
    plan = "\n".join(r[0] for r in server.query(database, "EXPLAIN (COSTS OFF) " + sql,
                                                 _settings(method, settings)))
    wanted = ("using %s" % method.index_name) if method.uses_index else "Seq Scan on items"
    if wanted not in plan:
        raise pg.PgError("%s: the recall query does not use %r:\n%s" % (method.name, wanted, plan))
    start = time.monotonic()
    rows = server.query(database, sql, _settings(method, settings))
    seconds = time.monotonic() - start
    found = {}
    for qid, item in rows:
        found.setdefault(int(qid) - 1, []).append(int(item))
    return found, query_count / seconds


def batch_pass(server, database, method, settings, query_count, k):
    """{query row: [ids]} from one tsdg_search_batch call over queries 1..query_count,
    and the queries per second of that call, timed on the server around the call alone
    (not the building of the array, nor the join back to the table)."""
    rows = server.query(database, """
        CREATE TEMP TABLE batch_result (query int, tid tid);
        CREATE TEMP TABLE batch_time (seconds float8);
        DO $$
        DECLARE
          qs vector[];
          started timestamptz;
        BEGIN
          SELECT array_agg(v ORDER BY id) INTO qs FROM queries WHERE id <= %d;
          started := clock_timestamp();
          INSERT INTO batch_result SELECT b.query, b.tid FROM tsdg_search_batch('%s', qs, %d) b;
          INSERT INTO batch_time VALUES (extract(epoch FROM clock_timestamp() - started));
        END $$;
        SELECT 0, seconds::text FROM batch_time
        UNION ALL
        SELECT r.query, i.id::text FROM batch_result r JOIN items i ON i.ctid = r.tid;
    """ % (query_count, method.index_name, k), _settings(method, settings))
    found = {}
    seconds = None
    for query, value in rows:
        if query == "0":
            seconds = float(value)
        else:
            found.setdefault(int(query) - 1, []).append(int(value))
    return found, query_count / seconds


def pgbench_run(server, database, method, settings, clients, seconds, query_count, k):
    """QPS and latency percentiles (ms) of `clients` sessions, each running the search
    for random queries for `seconds`."""
    with tempfile.TemporaryDirectory(prefix="sqlbench-") as work:
        script = os.path.join(work, "search.sql")
        with open(script, "w") as f:
            f.write("\\set qid random(1, %d)\n%s;\n" % (query_count, SEARCH_SQL % (":qid", k)))
        prefix = os.path.join(work, "txn")
        args = [server.pgbench, "-n", "-M", "prepared", "-f", script, "-c", str(clients),
                "-j", str(clients), "-T", str(seconds), "--log", "--log-prefix", prefix,
                server.conninfo(database)]
        done = subprocess.run(args, capture_output=True, text=True, cwd=work,
                              env=server.environment(_settings(method, settings)))
        if done.returncode != 0:
            raise pg.PgError("pgbench failed:\n%s\n%s" % (done.stdout[-2000:], done.stderr[-2000:]))
        tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
        failed = re.search(r"number of failed transactions: (\d+)", done.stdout)
        if not tps:
            raise pg.PgError("no tps in pgbench output:\n%s" % done.stdout)
        latencies = []
        for path in glob.glob(prefix + ".*"):
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 3 and fields[2].isdigit():
                        latencies.append(int(fields[2]))
    if not latencies:
        raise pg.PgError("pgbench logged no transactions")
    micros = np.array(latencies, dtype=np.float64)
    return {"qps": float(tps.group(1)), "transactions": len(latencies),
            "failed": int(failed.group(1)) if failed else 0,
            "latency_ms": {"p50": float(np.percentile(micros, 50)) / 1000,
                           "p99": float(np.percentile(micros, 99)) / 1000,
                           "mean": float(micros.mean()) / 1000}}


def _settings(method, settings):
    merged = dict(method.query_settings)
    merged.update(settings)
    return merged
