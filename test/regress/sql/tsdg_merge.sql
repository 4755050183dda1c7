-- Merging pending rows into the graph: tsdg_merge(), VACUUM past
-- tsdg.merge_threshold, deleted rows dropped, inserts during and after merges.
SET enable_seqscan = off;
SET client_min_messages = warning;

-- pseudo-random rows in [0, 1)^8, the same on every run
CREATE FUNCTION merge_vec(i int) RETURNS vector LANGUAGE sql IMMUTABLE AS $$
	SELECT (SELECT array_agg((x - floor(x))::real ORDER BY d)
			FROM generate_series(0, 7) d,
				 LATERAL (SELECT sin(i * 12.9898 + d * 78.233) * 43758.5453 AS x) r)::vector
$$;

CREATE TABLE merge_items (id int PRIMARY KEY, v vector(8));
INSERT INTO merge_items SELECT i, merge_vec(i) FROM generate_series(1, 4000) i;
CREATE INDEX merge_idx ON merge_items USING tsdg (v vector_l2_ops);

-- recall@10 of the index against the exact order over 30 queries, and
-- whether every query equal to a row of the table finds that row first
CREATE FUNCTION merge_check(OUT recall_ok bool, OUT self_found bool) LANGUAGE sql AS $$
	WITH q AS (SELECT id, v FROM merge_items WHERE id % 97 = 3 ORDER BY id LIMIT 30),
	hits AS (
		SELECT q.id,
			(SELECT count(*) FROM
				(SELECT m.id FROM merge_items m ORDER BY m.v <-> q.v LIMIT 10) a
				WHERE a.id IN (SELECT m.id FROM merge_items m ORDER BY (m.v <-> q.v) + 0, m.id LIMIT 10)) AS hits,
			(SELECT m.id FROM merge_items m ORDER BY m.v <-> q.v LIMIT 1) AS first
		FROM q)
	SELECT avg(hits) / 10 >= 0.95, bool_and(first = id) FROM hits
$$;

SELECT rows, pending, deleted, graph_version, merges, last_merge IS NULL AS never_merged
FROM tsdg_index_info('merge_idx');
SELECT * FROM merge_check();

-- pending rows are found before any merge
INSERT INTO merge_items SELECT i, merge_vec(i) FROM generate_series(4001, 5500) i;
SELECT rows, pending, graph_version FROM tsdg_index_info('merge_idx');
SELECT id FROM merge_items ORDER BY v <-> merge_vec(5321) LIMIT 1;
SELECT * FROM merge_check();

-- the merge moves them into the graph
SELECT tsdg_merge('merge_idx');
SELECT rows, pending, deleted, graph_version, merges, last_merge IS NOT NULL AS merged
FROM tsdg_index_info('merge_idx');
SELECT id FROM merge_items ORDER BY v <-> merge_vec(5321) LIMIT 1;
SELECT * FROM merge_check();
-- every row is still reachable through the index
SELECT count(*) FROM (SELECT id FROM merge_items ORDER BY v <-> merge_vec(1) LIMIT 10000) s;

-- nothing to merge: nothing changes
SELECT tsdg_merge('merge_idx');
SELECT graph_version, merges FROM tsdg_index_info('merge_idx');

-- rows inserted after a merge are pending again, and found
INSERT INTO merge_items SELECT i, merge_vec(i) FROM generate_series(5501, 5600) i;
SELECT rows, pending FROM tsdg_index_info('merge_idx');
SELECT id FROM merge_items ORDER BY v <-> merge_vec(5555) LIMIT 1;

-- a merge past maintenance_work_mem says so and goes on in temporary files
-- (in the session: the GPU worker's merge reads into its segment)
CREATE TABLE merge_mem (v vector(3));
INSERT INTO merge_mem SELECT ARRAY[i, i % 7, i % 11]::real[]::vector FROM generate_series(1, 2000) i;
CREATE INDEX merge_mem_v ON merge_mem USING tsdg (v vector_l2_ops) WITH (degree = 32, build_k = 64);
INSERT INTO merge_mem SELECT ARRAY[i, i % 7, i % 11]::real[]::vector FROM generate_series(2001, 2500) i;
SET maintenance_work_mem = '1MB';
SET tsdg.device = cpu;
SET client_min_messages = notice;
SELECT tsdg_merge('merge_mem_v');
SET client_min_messages = warning;
RESET tsdg.device;
RESET maintenance_work_mem;
SELECT rows, pending FROM tsdg_index_info('merge_mem_v');
SET enable_seqscan = off;
SELECT v FROM merge_mem ORDER BY v <-> '[2400,6,2]' LIMIT 3;
SELECT count(*) FROM (SELECT v FROM merge_mem ORDER BY v <-> '[0,0,0]') s;
RESET enable_seqscan;
DROP TABLE merge_mem;

-- VACUUM below the threshold leaves the pending rows alone
DELETE FROM merge_items WHERE id % 10 = 0;
SET tsdg.merge_threshold = 100000;
VACUUM merge_items;
SELECT rows, pending, deleted, graph_version FROM tsdg_index_info('merge_idx');

-- past the threshold it merges, dropping the deleted rows
SET tsdg.merge_threshold = 10;
SET tsdg.merge_scale_factor = 0;
VACUUM merge_items;
SELECT rows, pending, deleted, graph_version, merges FROM tsdg_index_info('merge_idx');
SELECT count(*) FROM (SELECT id FROM merge_items ORDER BY v <-> merge_vec(1) LIMIT 10000) s;
SELECT count(*) AS deleted_returned
FROM (SELECT id FROM merge_items ORDER BY v <-> merge_vec(10) LIMIT 10000) s WHERE id % 10 = 0;
SELECT * FROM merge_check();

-- a churning table: the index stops growing once merges reuse their blocks
CREATE TABLE merge_sizes (cycle int, size bigint);
SELECT cmd FROM generate_series(1, 8) c,
	LATERAL (VALUES
		(1, format('DELETE FROM merge_items WHERE id IN (SELECT id FROM merge_items ORDER BY id LIMIT 400)')),
		(2, format('INSERT INTO merge_items SELECT i, merge_vec(i) FROM generate_series(%s, %s) i',
				   10000 + c * 400, 10000 + c * 400 + 399)),
		(3, 'VACUUM merge_items'),
		(4, format('INSERT INTO merge_sizes SELECT %s, size FROM tsdg_index_info(''merge_idx'')', c))
	) AS step(n, cmd)
ORDER BY c, n \gexec
SELECT (SELECT size FROM merge_sizes WHERE cycle = 8) <= (SELECT size FROM merge_sizes WHERE cycle = 4)
	AS stopped_growing;
SELECT rows, pending, deleted, merges FROM tsdg_index_info('merge_idx');
SELECT * FROM merge_check();

-- cosine: rows are merged normalized, like the build
CREATE TABLE merge_cos (id int, v vector(8));
INSERT INTO merge_cos SELECT i, merge_vec(i) FROM generate_series(1, 300) i;
CREATE INDEX merge_cos_idx ON merge_cos USING tsdg (v vector_cosine_ops);
INSERT INTO merge_cos SELECT i, merge_vec(i) FROM generate_series(301, 400) i;
SELECT tsdg_merge('merge_cos_idx');
SELECT id FROM merge_cos ORDER BY v <=> merge_vec(350) LIMIT 1;

-- L1: the merged rows are found by their own vector, and a merged index
-- answers as a sequential scan does
CREATE TABLE merge_l1 (id int, v vector(8));
INSERT INTO merge_l1 SELECT i, merge_vec(i) FROM generate_series(1, 600) i;
CREATE INDEX merge_l1_idx ON merge_l1 USING tsdg (v vector_l1_ops);
INSERT INTO merge_l1 SELECT i, merge_vec(i) FROM generate_series(601, 800) i;
SELECT tsdg_merge('merge_l1_idx');
SELECT metric, rows, pending FROM tsdg_index_info('merge_l1_idx');
SELECT count(*) AS found_first FROM generate_series(601, 800, 7) q
	WHERE (SELECT id FROM merge_l1 ORDER BY v <+> merge_vec(q) LIMIT 1) = q;
SELECT array_agg(id) = (SELECT array_agg(id) FROM (SELECT id FROM merge_l1
		ORDER BY (v <+> merge_vec(333)) + 0, id LIMIT 10) e) AS same_as_seq_scan
	FROM (SELECT id FROM merge_l1 ORDER BY v <+> merge_vec(333) LIMIT 10) i;

-- an index built on an empty table: the first merge builds its graph, and
-- a merge that drops every row leaves an empty graph that takes rows again
CREATE TABLE merge_empty (id int, v vector);
CREATE INDEX merge_empty_idx ON merge_empty USING tsdg (v vector_l2_ops);
SELECT tsdg_merge('merge_empty_idx');
INSERT INTO merge_empty SELECT i, ARRAY[i, i % 7, i % 13]::real[]::vector FROM generate_series(1, 500) i;
SELECT tsdg_merge('merge_empty_idx');
SELECT rows, pending, graph_version, dims, merges FROM tsdg_index_info('merge_empty_idx');
SELECT id FROM merge_empty ORDER BY v <-> '[250,5,3]' LIMIT 3;
DELETE FROM merge_empty;
VACUUM merge_empty;
SELECT tsdg_merge('merge_empty_idx');
SELECT rows, pending, deleted, graph_version FROM tsdg_index_info('merge_empty_idx');
INSERT INTO merge_empty VALUES (1, '[1,1,1]');
SELECT tsdg_merge('merge_empty_idx');
SELECT id FROM merge_empty ORDER BY v <-> '[1,1,1]' LIMIT 3;

-- rows stay where they are: one-row merges of rows as wide as a page holds
-- (one row record, one pending record a page) spread 300 rows over 12 row
-- extents; every row is found by its own vector
CREATE TABLE merge_wide (id int, v vector(2038));
CREATE FUNCTION merge_wide_vec(i int) RETURNS vector LANGUAGE sql IMMUTABLE AS
$$ SELECT array_agg(sin(i * 0.37 + j * 0.11)::real ORDER BY j)::vector FROM generate_series(1, 2038) j $$;
INSERT INTO merge_wide SELECT i, merge_wide_vec(i) FROM generate_series(1, 3) i;
CREATE INDEX merge_wide_idx ON merge_wide USING tsdg (v vector_l2_ops);
DO $$
BEGIN
	FOR i IN 4..300 LOOP
		INSERT INTO merge_wide VALUES (i, merge_wide_vec(i));
		PERFORM tsdg_merge('merge_wide_idx');
	END LOOP;
END
$$;
SELECT rows, pending, merges FROM tsdg_index_info('merge_wide_idx');
SET enable_seqscan = off;
SELECT count(*) AS not_found_first FROM merge_wide w
WHERE (SELECT x.id FROM merge_wide x ORDER BY x.v <-> w.v LIMIT 1) <> w.id;
RESET enable_seqscan;

-- a merge looks up each new row by its own vector at tsdg.ef_search; the
-- rows those searches do not reach are searched exactly from then on, so
-- even the narrowest search finds each first, on the pages and in a batch
CREATE TABLE merge_reach (id int PRIMARY KEY, v vector(8));
INSERT INTO merge_reach SELECT i, merge_vec(i) FROM generate_series(1, 3000) i;
CREATE INDEX merge_reach_idx ON merge_reach USING tsdg (v vector_l2_ops)
	WITH (degree = 6, build_k = 6, samples = 3);
INSERT INTO merge_reach SELECT i, merge_vec(i) FROM generate_series(3001, 4000) i;
SET tsdg.ef_search = 1;
SELECT tsdg_merge('merge_reach_idx');
SELECT unreached > 0 AS some_unreached, unreached < 500 AS most_reached
FROM tsdg_index_info('merge_reach_idx');
SET enable_seqscan = off;
SELECT count(*) AS not_found_first FROM merge_reach q
WHERE (SELECT r.id FROM merge_reach r ORDER BY r.v <-> q.v LIMIT 1) <> q.id AND q.id > 3000;
RESET enable_seqscan;
SELECT count(*) AS not_found_first_in_batch
FROM tsdg_search_batch('merge_reach_idx',
	ARRAY(SELECT v FROM merge_reach WHERE id > 3000 ORDER BY id), 1) b
JOIN merge_reach r ON r.ctid = b.tid
WHERE r.id <> b.query + 3000;
RESET tsdg.ef_search;
-- the next merge checks its own rows only
INSERT INTO merge_reach SELECT i, merge_vec(i) FROM generate_series(4001, 4010) i;
SELECT tsdg_merge('merge_reach_idx');
SELECT unreached FROM tsdg_index_info('merge_reach_idx');

-- errors
SELECT tsdg_merge('merge_items_pkey');
SELECT tsdg_merge('merge_items');

DROP TABLE merge_items, merge_sizes, merge_cos, merge_l1, merge_empty, merge_wide, merge_reach;
DROP FUNCTION merge_check, merge_vec, merge_wide_vec;
