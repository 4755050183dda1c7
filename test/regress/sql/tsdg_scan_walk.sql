-- The scan's graph walk over the pages (tsdgscanwalk.c) keeps, per backend,
-- the buffer each block was last found in and tries it first: after a
-- REINDEX, a dropped and rebuilt index, beside another index of the same
-- shape and on a temporary index (local buffers, no hints), the session that
-- made the hints still gets the exact nearest rows.
SET client_min_messages = warning;
SET tsdg.device = cpu;
SET enable_seqscan = off;
SET tsdg.ef_search = 400;

CREATE TABLE tw_a (id int, v vector(8));
CREATE TABLE tw_b (id int, v vector(8));
INSERT INTO tw_a SELECT i, (SELECT array_agg(sin(i * j * 0.37 + j)) FROM generate_series(1, 8) j)::real[]::vector
	FROM generate_series(1, 3000) i;
-- the same shape, other vectors: the same block numbers hold other rows
INSERT INTO tw_b SELECT i, (SELECT array_agg(cos(i * j * 0.23 - j) * 3) FROM generate_series(1, 8) j)::real[]::vector
	FROM generate_series(1, 3000) i;
CREATE INDEX tw_a_l2 ON tw_a USING tsdg (v vector_l2_ops);
CREATE INDEX tw_b_l2 ON tw_b USING tsdg (v vector_l2_ops);

-- how many of the index's first 10 rows are among the exact 10 nearest
-- (ties at the 10th distance count); the exact order is a sort, since the
-- index serves no ORDER BY of (v <-> q) + 0
CREATE FUNCTION tw_found(tab regclass, q vector) RETURNS int LANGUAGE plpgsql AS $$
DECLARE found int;
BEGIN
	EXECUTE format('SELECT count(*)::int FROM (SELECT v FROM %s ORDER BY v <-> $1 LIMIT 10) i
		WHERE (v <-> $1) <= (SELECT max(d) FROM (SELECT (v <-> $1) + 0 AS d FROM %s ORDER BY 1 LIMIT 10) e)',
		tab, tab)
		INTO found USING q;
	RETURN found;
END $$;
CREATE TABLE tw_queries (q vector(8));
INSERT INTO tw_queries VALUES ('[0,0,0,0,0,0,0,0]'), ('[1,-1,0.5,0.2,0,1,-0.3,0.7]'), ('[3,3,-3,2,0,-1,2,1]');

SELECT tw_found('tw_a', q) AS a, tw_found('tw_b', q) AS b FROM tw_queries;
-- a new file for tw_a: the hints point at buffers of the old one
REINDEX INDEX tw_a_l2;
SELECT tw_found('tw_a', q) AS a_reindexed, tw_found('tw_b', q) AS b FROM tw_queries;
-- tw_b's index dropped and made again over changed rows
DROP INDEX tw_b_l2;
UPDATE tw_b SET v = (SELECT array_agg(-x) FROM unnest(v::real[]) x)::vector;
CREATE INDEX tw_b_l2 ON tw_b USING tsdg (v vector_l2_ops);
SELECT tw_found('tw_b', q) AS b_rebuilt, tw_found('tw_a', q) AS a FROM tw_queries;
-- a temporary index reads local buffers, which take no hints
CREATE TEMP TABLE tw_t AS SELECT id, (SELECT array_agg(2 * x) FROM unnest(v::real[]) x)::vector(8) AS v FROM tw_a;
CREATE INDEX tw_t_l2 ON tw_t USING tsdg (v vector_l2_ops);
SELECT tw_found('tw_t', q) AS temporary, tw_found('tw_a', q) AS a FROM tw_queries;

DROP TABLE tw_a, tw_b, tw_t, tw_queries;
DROP FUNCTION tw_found(regclass, vector);
