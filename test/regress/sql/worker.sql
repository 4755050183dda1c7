-- The GPU worker's SQL surface, on any machine: tsdg_gpu_status() has its
-- shape whether a GPU, the CPU-backed worker or no worker answers,
-- tsdg_search_batch() returns what ORDER BY returns (on the GPU worker when
-- it runs, else on the CPU), and tsdg_search_batch_arrays() the same
-- neighbors as arrays, a row per query.
SET client_min_messages = warning;

-- the shape of the status row
SELECT unnest(string_to_array(pg_get_function_arguments('tsdg_gpu_status'::regproc), ', ')) AS column;
-- (without the preload there is no worker: its columns are NULL)
SELECT state IN ('not preloaded', 'stopped', 'starting', 'ready', 'busy', 'no gpu', 'disabled') AS known_state,
	CASE WHEN state = 'not preloaded' THEN cached_indexes IS NULL
		 ELSE jsonb_typeof(cached_indexes) = 'array' END AS cached_ok,
	CASE WHEN state = 'not preloaded' THEN queue_depth IS NULL ELSE queue_depth >= 0 END AS queue_ok,
	CASE WHEN state = 'not preloaded' THEN batches IS NULL AND fallbacks IS NULL
		 ELSE batches >= 0 AND fallbacks >= 0 END AS counters_ok,
	CASE WHEN state = 'not preloaded' THEN mean_batch_size IS NULL
		 ELSE (batches = 0) = (mean_batch_size IS NULL) END AS mean_defined
FROM tsdg_gpu_status();

CREATE TABLE wb (id int, v vector(8));
INSERT INTO wb SELECT i,
	ARRAY[sin(i), cos(i * 0.3), (i % 17) / 9.0, (i % 5) / 3.0,
		  sin(i * 0.11), cos(i * 0.05), (i % 23) / 11.0, (i % 7) / 4.0]::real[]::vector
	FROM generate_series(1, 1500) i;
CREATE INDEX wb_l2 ON wb USING tsdg (v vector_l2_ops);
CREATE INDEX wb_cos ON wb USING tsdg (v vector_cosine_ops);
CREATE INDEX wb_l1 ON wb USING tsdg (v vector_l1_ops);
-- rows inserted after the build are pending: the batch must find them too
INSERT INTO wb SELECT i,
	ARRAY[sin(i), cos(i * 0.3), (i % 17) / 9.0, (i % 5) / 3.0,
		  sin(i * 0.11), cos(i * 0.05), (i % 23) / 11.0, (i % 7) / 4.0]::real[]::vector
	FROM generate_series(1501, 1550) i;

-- on 1550 rows a search this wide finds the exact answers
SET tsdg.ef_search = 400;

CREATE TABLE wq AS SELECT row_number() OVER (ORDER BY id)::int AS q, v
	FROM wb WHERE id IN (3, 77, 500, 1200, 1511, 1549) ;

-- batch results against the exact order, for both metrics
CREATE FUNCTION batch_vs_exact(idx regclass, op text, k int) RETURNS TABLE(q int, same bool)
LANGUAGE plpgsql AS $$
BEGIN
	RETURN QUERY EXECUTE format($f$
		WITH b AS (
			SELECT b.query, array_agg(w.id ORDER BY b.distance, w.id) AS ids
			FROM tsdg_search_batch(%L, (SELECT array_agg(v ORDER BY q) FROM wq), %s) b
			JOIN wb w ON w.ctid = b.tid GROUP BY b.query),
		e AS (
			SELECT wq.q, (SELECT array_agg(id ORDER BY d, id) FROM
				(SELECT id, v %s wq.v AS d FROM wb ORDER BY v %s wq.v, id LIMIT %s) s) AS ids
			FROM wq)
		SELECT e.q, b.ids = e.ids FROM e LEFT JOIN b ON b.query = e.q ORDER BY e.q$f$,
		idx, k, op, op, k);
END $$;
SELECT * FROM batch_vs_exact('wb_l2', '<->', 10);
SELECT * FROM batch_vs_exact('wb_cos', '<=>', 5);
SELECT * FROM batch_vs_exact('wb_l1', '<+>', 10);

-- distances are the operator's values
SELECT b.query, w.id, round(b.distance::numeric, 4) = round((w.v <-> q.v)::numeric, 4) AS same_distance
FROM tsdg_search_batch('wb_l2', (SELECT array_agg(v ORDER BY q) FROM wq WHERE q <= 2), 3) b
JOIN wb w ON w.ctid = b.tid JOIN wq q ON q.q = b.query
ORDER BY b.query, b.distance, w.id;

-- and the same rows as the index scan
SET enable_seqscan = off;
SELECT (SELECT array_agg(id) FROM (SELECT id FROM wb ORDER BY v <-> (SELECT v FROM wq WHERE q = 4) LIMIT 10) s)
	= (SELECT array_agg(w.id ORDER BY b.distance) FROM tsdg_search_batch('wb_l2', ARRAY[(SELECT v FROM wq WHERE q = 4)], 10) b
	   JOIN wb w ON w.ctid = b.tid) AS same_as_index_scan;
RESET enable_seqscan;

-- NULL queries have no rows; query numbers stay positions in the array
SELECT b.query, count(*) FROM tsdg_search_batch('wb_l2', ARRAY[NULL, (SELECT v FROM wq WHERE q = 1), NULL]::vector[], 4) b
GROUP BY b.query ORDER BY b.query;
SELECT count(*) FROM tsdg_search_batch('wb_l2', ARRAY[]::vector[], 4);

-- bad input
SELECT * FROM tsdg_search_batch('wb_l2', ARRAY['[1,2,3]']::vector[], 4);
SELECT * FROM tsdg_search_batch('wb_l2', ARRAY[(SELECT v FROM wq WHERE q = 1)], 0);
SELECT * FROM tsdg_search_batch('wb', ARRAY[(SELECT v FROM wq WHERE q = 1)], 4);
CREATE INDEX wb_id ON wb (id);
SELECT * FROM tsdg_search_batch('wb_id', ARRAY[(SELECT v FROM wq WHERE q = 1)], 4);

-- an empty index
CREATE TABLE wempty (v vector(3));
CREATE INDEX wempty_idx ON wempty USING tsdg (v vector_l2_ops);
SELECT count(*) FROM tsdg_search_batch('wempty_idx', ARRAY['[1,2,3]']::vector[], 4);

SELECT * FROM tsdg_search_batch_arrays('wempty_idx', ARRAY['[1,2,3]', '[4,5,6]']::vector[], 4);

-- tsdg_search_batch_arrays: the neighbors of tsdg_search_batch, in its order,
-- with its distances, pending rows included, for both metrics
CREATE FUNCTION arrays_vs_rows(idx regclass, k int) RETURNS TABLE(q int, same_tids bool, same_distances bool)
LANGUAGE sql AS $$
	WITH r AS (
		SELECT b.query, array_agg(b.tid ORDER BY b.n) AS tids, array_agg(b.distance ORDER BY b.n) AS distances
		FROM tsdg_search_batch(idx, (SELECT array_agg(v ORDER BY q) FROM wq), k) WITH ORDINALITY AS b(query, tid, distance, n)
		GROUP BY b.query)
	SELECT a.query, a.tids = r.tids, a.distances = r.distances
	FROM tsdg_search_batch_arrays(idx, (SELECT array_agg(v ORDER BY q) FROM wq), k) a
	LEFT JOIN r ON r.query = a.query ORDER BY a.query
$$;
SELECT * FROM arrays_vs_rows('wb_l2', 10);
SELECT * FROM arrays_vs_rows('wb_cos', 5);
SELECT * FROM arrays_vs_rows('wb_l1', 10);
-- and the exact neighbors, nearest first, through the TIDs
SELECT a.query, (SELECT array_agg(w.id ORDER BY a.distances[t.n], w.id) FROM unnest(a.tids) WITH ORDINALITY t(tid, n)
				 JOIN wb w ON w.ctid = t.tid)
	= (SELECT array_agg(id) FROM (SELECT id FROM wb ORDER BY v <-> q.v, id LIMIT 10) s) AS exact,
	a.distances = (SELECT array_agg(d ORDER BY d) FROM unnest(a.distances) d) AS nearest_first
FROM tsdg_search_batch_arrays('wb_l2', (SELECT array_agg(v ORDER BY q) FROM wq), 10) a
JOIN wq q ON q.q = a.query ORDER BY a.query;
-- the CPU path gives the same arrays (where the worker runs, the call above was its)
CREATE TABLE warrays AS SELECT * FROM tsdg_search_batch_arrays('wb_l2', (SELECT array_agg(v ORDER BY q) FROM wq), 10);
SET tsdg.device = cpu;
-- (the GPU sums a distance in another order than the CPU: equal to rounding)
SELECT a.query, a.tids = w.tids AS same_tids,
       (SELECT bool_and(abs(x - y) <= 1e-5 * greatest(1, abs(y)))
        FROM unnest(a.distances, w.distances) AS d(x, y)) AS same_distances
FROM tsdg_search_batch_arrays('wb_l2', (SELECT array_agg(v ORDER BY q) FROM wq), 10) a
JOIN warrays w USING (query) ORDER BY a.query;
RESET tsdg.device;

-- a large array kept in a table is read from its TOAST table in slices (the
-- elements cross slice boundaries): the answers of the same array built in
-- the query
RESET tsdg.ef_search;
CREATE TABLE wbig (a vector[]);
ALTER TABLE wbig ALTER COLUMN a SET STORAGE EXTERNAL;
CREATE VIEW wbig_queries AS
	SELECT n, (SELECT v FROM wb WHERE id = 1 + (n * 7919) % 1550) AS v FROM generate_series(1, 8000) n;
INSERT INTO wbig SELECT array_agg(v ORDER BY n) FROM wbig_queries;
SELECT pg_column_size(a) > 300000 AS out_of_line_size FROM wbig;
SELECT (SELECT md5(string_agg(b.query || ':' || b.tids::text || ':' || b.distances::text, ',' ORDER BY b.query))
		FROM tsdg_search_batch_arrays('wb_l2', (SELECT a FROM wbig), 5) b)
	= (SELECT md5(string_agg(b.query || ':' || b.tids::text || ':' || b.distances::text, ',' ORDER BY b.query))
		FROM tsdg_search_batch_arrays('wb_l2', (SELECT array_agg(v ORDER BY n) FROM wbig_queries), 5) b) AS arrays_same,
	(SELECT md5(string_agg(b.query || ':' || b.tid || ':' || b.distance, ',' ORDER BY b.query, b.distance, b.tid))
		FROM tsdg_search_batch('wb_l2', (SELECT a FROM wbig), 5) b)
	= (SELECT md5(string_agg(b.query || ':' || b.tid || ':' || b.distance, ',' ORDER BY b.query, b.distance, b.tid))
		FROM tsdg_search_batch('wb_l2', (SELECT array_agg(v ORDER BY n) FROM wbig_queries), 5) b) AS rows_same,
	(SELECT count(*) FROM tsdg_search_batch_arrays('wb_l2', (SELECT a FROM wbig), 5)) AS queries;
SET tsdg.ef_search = 400;

-- a row per query: an empty array has none, a zero query under cosine has no neighbor
SELECT count(*) FROM tsdg_search_batch_arrays('wb_l2', ARRAY[]::vector[], 4);
SELECT query, cardinality(tids) AS found, cardinality(distances) AS distances
FROM tsdg_search_batch_arrays('wb_cos', ARRAY['[0,0,0,0,0,0,0,0]', (SELECT v FROM wq WHERE q = 1)]::vector[], 3);
-- k beyond the rows of the index: as many neighbors as rows
CREATE TABLE wsmall (id int, v vector(2));
INSERT INTO wsmall VALUES (1, '[0,0]'), (2, '[1,0]'), (3, '[0,2]');
CREATE INDEX wsmall_idx ON wsmall USING tsdg (v vector_l2_ops);
SELECT query, distances FROM tsdg_search_batch_arrays('wsmall_idx', ARRAY['[0,0]', '[1,1]']::vector[], 10);
SELECT query, count(*) FROM tsdg_search_batch('wsmall_idx', ARRAY['[0,0]', '[1,1]']::vector[], 10) GROUP BY query ORDER BY query;

-- NULL queries are an error here (there is no row to leave out); bad input as above
SELECT * FROM tsdg_search_batch_arrays('wb_l2', ARRAY[NULL, (SELECT v FROM wq WHERE q = 1)]::vector[], 4);
SELECT * FROM tsdg_search_batch_arrays('wb_l2', ARRAY['[1,2,3]']::vector[], 4);
SELECT * FROM tsdg_search_batch_arrays('wb_l2', ARRAY[(SELECT v FROM wq WHERE q = 1)], 1001);
SELECT * FROM tsdg_search_batch_arrays('wb_id', ARRAY[(SELECT v FROM wq WHERE q = 1)], 4);

DROP VIEW wbig_queries;
DROP TABLE wb, wq, wempty, wsmall, warrays, wbig;
DROP FUNCTION arrays_vs_rows(regclass, int);
DROP FUNCTION batch_vs_exact(regclass, text, int);
