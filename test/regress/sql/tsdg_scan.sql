-- Ordered scans of a tsdg index: the planner's choice, results against the
-- exact order, pending rows, deleted rows, filters that need more rows.
SET client_min_messages = warning;

CREATE TABLE ts (id int, cat int, v vector(4));
INSERT INTO ts SELECT i, i % 10,
	ARRAY[sin(i), cos(i * 0.7), (i % 37) / 10.0, (i % 11) / 5.0]::real[]::vector
	FROM generate_series(1, 2000) i;
INSERT INTO ts VALUES (2001, 1, NULL);
CREATE INDEX ts_l2 ON ts USING tsdg (v vector_l2_ops);
ANALYZE ts;

-- ORDER BY distance LIMIT uses the index even on a table this small, whose
-- search at the default ef_search scores a fraction of the rows
-- (tsdg_planner.sql checks where a sequential scan wins); a WHERE never
-- uses it, even with sequential scans discouraged
EXPLAIN (COSTS OFF) SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM ts WHERE v <-> '[0,0,1,1]' < 0.5;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM ts WHERE v <-> '[0,0,1,1]' < 0.5;
EXPLAIN (COSTS OFF) SELECT id FROM ts WHERE v = '[0,0,1,1]';

-- the exact answers (a sequential scan) to compare with; on 2000 rows a
-- search this wide finds them all (recall at the defaults is measured by
-- test/tap/tsdg_recall.sh)
SET tsdg.ef_search = 400;
CREATE FUNCTION exact_ids(q vector, op text, k int) RETURNS int[] LANGUAGE plpgsql AS $$
DECLARE r int[];
BEGIN
	SET LOCAL enable_indexscan = off;
	SET LOCAL enable_seqscan = on;
	EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM ts ORDER BY v %s $1, id LIMIT $2) s', op)
		INTO r USING q, k;
	RETURN r;
END $$;
CREATE FUNCTION index_ids(q vector, op text, k int) RETURNS int[] LANGUAGE plpgsql AS $$
DECLARE r int[];
BEGIN
	SET LOCAL enable_seqscan = off;
	EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM ts ORDER BY v %s $1 LIMIT $2) s', op)
		INTO r USING q, k;
	RETURN r;
END $$;
-- ids both lists share, order aside (ties at the k-th distance aside too)
CREATE FUNCTION overlap(a int[], b int[]) RETURNS int LANGUAGE sql
	AS $$ SELECT count(*)::int FROM unnest(a) x WHERE x = ANY(b) $$;

-- rows come back in distance order, with the distances the operator computes
SELECT id, round((v <-> '[0,0,1,1]')::numeric, 4) AS dist
	FROM ts ORDER BY v <-> '[0,0,1,1]' LIMIT 5;
SELECT bool_and(d >= lag_d) AS ordered, count(*) FROM (
	SELECT v <-> '[0.5,0.5,2,1]' AS d, lag(v <-> '[0.5,0.5,2,1]') OVER () AS lag_d
	FROM (SELECT v FROM ts ORDER BY v <-> '[0.5,0.5,2,1]' LIMIT 100) s) t
	WHERE lag_d IS NOT NULL;
SELECT overlap(index_ids(q, '<->', 10), exact_ids(q, '<->', 10)) AS l2_found_of_10
	FROM (VALUES ('[0,0,1,1]'::vector), ('[1,-1,3.5,0]'), ('[0.3,0.2,0.1,2]')) s(q);

-- every operator class
CREATE INDEX ts_ip ON ts USING tsdg (v vector_ip_ops);
CREATE INDEX ts_cos ON ts USING tsdg (v vector_cosine_ops);
CREATE INDEX ts_l1 ON ts USING tsdg (v vector_l1_ops);
EXPLAIN (COSTS OFF) SELECT id FROM ts ORDER BY v <#> '[1,1,1,1]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM ts ORDER BY v <=> '[1,1,1,1]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM ts ORDER BY v <+> '[1,1,1,1]' LIMIT 5;
SELECT overlap(index_ids(q, '<#>', 10), exact_ids(q, '<#>', 10)) AS ip_found_of_10,
	overlap(index_ids(q, '<=>', 10), exact_ids(q, '<=>', 10)) AS cosine_found_of_10,
	overlap(index_ids(q, '<+>', 10), exact_ids(q, '<+>', 10)) AS l1_found_of_10
	FROM (VALUES ('[1,1,1,1]'::vector), ('[-1,0.5,0.2,3]')) s(q);
SELECT id, round((v <#> '[1,1,1,1]')::numeric, 4) AS neg_ip
	FROM ts ORDER BY v <#> '[1,1,1,1]' LIMIT 3;
SELECT id, round((v <+> '[1,1,1,1]')::numeric, 4) AS l1
	FROM ts ORDER BY v <+> '[1,1,1,1]' LIMIT 3;
-- L1 without a LIMIT: every indexed row once, in distance order; a NULL query
-- (not folded to a constant) returns them too, in no order
SELECT count(*), count(DISTINCT id), bool_and(d >= prev) AS ordered FROM (
	SELECT id, d, lag(d, 1, 0) OVER (ORDER BY n) AS prev FROM (
		SELECT row_number() OVER () AS n, id, v <+> '[0,0,1,1]' AS d
		FROM (SELECT id, v FROM ts ORDER BY v <+> '[0,0,1,1]') o) s) t;
SELECT count(*) FROM (SELECT id FROM ts ORDER BY v <+> (SELECT NULL::vector)) s;
DROP INDEX ts_ip, ts_cos, ts_l1;
RESET tsdg.ef_search;

-- the query must have the index's dimensions; a NULL query returns rows in no order
SELECT id FROM ts ORDER BY v <-> '[1,2,3]' LIMIT 1;
SELECT count(*) FROM (SELECT id FROM ts ORDER BY v <-> NULL LIMIT 7) s;

-- inserted rows are found by the next query
INSERT INTO ts VALUES (3001, 1, '[10,10,10,10]'), (3002, 2, '[10,10,10,10.1]');
SELECT pending FROM tsdg_index_info('ts_l2');
SELECT id FROM ts ORDER BY v <-> '[10,10,10,10]' LIMIT 3;

-- a WHERE filter that rejects most rows still gets the whole LIMIT
SELECT count(*) FROM (SELECT id FROM ts WHERE cat = 3 ORDER BY v <-> '[0,0,1,1]' LIMIT 50) s;
SET tsdg.ef_search = 10;
SELECT count(*) FROM (SELECT id FROM ts WHERE cat = 3 ORDER BY v <-> '[0,0,1,1]' LIMIT 150) s;
SELECT count(*) FROM (SELECT id FROM ts WHERE id % 400 = 0 ORDER BY v <-> '[0,0,1,1]' LIMIT 10) s;
-- and without LIMIT every indexed row, once
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]') s;
-- past tsdg.max_scan_tuples graph rows the rest are scored exactly: still every row, once
SET tsdg.max_scan_tuples = 100;
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]') s;
-- and the rows past the graph search's come in distance order
SELECT count(*) AS out_of_order FROM (
	SELECT d, lag(d) OVER (ORDER BY n) AS prev, n FROM (
		SELECT row_number() OVER () AS n, v <-> '[0,0,1,1]' AS d
		FROM (SELECT v FROM ts ORDER BY v <-> '[0,0,1,1]') o) s) t
	WHERE n > 200 AND d < prev;
RESET tsdg.max_scan_tuples;
RESET tsdg.ef_search;

-- deleted rows are never returned after VACUUM, from the graph or the pending list
SELECT array_agg(id) AS nearest_before FROM (SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]' LIMIT 3) s \gset
DELETE FROM ts WHERE id = ANY(:'nearest_before'::int[]) OR id = 3001;
VACUUM ts;
SELECT rows, pending, deleted FROM tsdg_index_info('ts_l2');
SELECT count(*) AS deleted_returned FROM (SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]') s
	WHERE id = ANY(:'nearest_before'::int[]) OR id = 3001;
SELECT id FROM ts ORDER BY v <-> '[10,10,10,10]' LIMIT 1;
SELECT overlap(index_ids('[0,0,1,1]', '<->', 10), exact_ids('[0,0,1,1]', '<->', 10)) AS found_of_10;
-- heap slots that VACUUM freed and new rows reuse are not returned twice
-- (once for the deleted node, once for the new pending row)
INSERT INTO ts SELECT 4000 + i, 5, '[20,20,20,20]' FROM generate_series(1, 5) i;
SELECT count(*), count(DISTINCT id), count(DISTINCT ctid)
	FROM (SELECT id, ctid FROM ts ORDER BY v <-> '[20,20,20,20]') s;
SELECT count(*) FROM ts WHERE v IS NOT NULL;

-- idx_scan of pg_stat_user_indexes counts each scan, as for the core's indexes
SELECT pg_stat_force_next_flush();
SELECT idx_scan AS scans_before FROM pg_stat_user_indexes WHERE indexrelname = 'ts_l2' \gset
SELECT count(*) FROM (SELECT id FROM ts ORDER BY v <-> '[0,0,1,1]' LIMIT 3) s;
SELECT count(*) FROM (SELECT id FROM ts ORDER BY v <-> '[1,0,1,1]' LIMIT 3) s;
SELECT pg_stat_force_next_flush();
SELECT idx_scan - :scans_before AS scans_counted FROM pg_stat_user_indexes WHERE indexrelname = 'ts_l2';

RESET enable_seqscan;
DROP TABLE ts;
DROP FUNCTION exact_ids, index_ids, overlap;
