-- Every row through the index: an ordered scan returns every row once, in
-- distance order past the graph search's own rows; 1,000 identical vectors
-- among 10,000 are all found, ahead of every other row; under inner product
-- on vectors of very different norms (where the nearest rows of most rows are
-- the few longest ones) a full scan still reaches every row, and a selective
-- filter still fills its LIMIT (in an order as approximate as the graph's);
-- under L1 the copies come first too, and rows whose distances pass the
-- float range are all returned.
SET client_min_messages = warning;
SELECT setseed(0.27);
CREATE TABLE rdup (id int, v vector(8));
INSERT INTO rdup SELECT i, CASE WHEN i % 10 = 0 THEN '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]'::vector
	ELSE (SELECT array_agg(random())::real[] FROM generate_series(1, 8) WHERE i > 0)::vector END
	FROM generate_series(1, 10000) i;
CREATE INDEX rdup_v ON rdup USING tsdg (v vector_l2_ops);
SET enable_seqscan = off;

-- the copies first, all of them
EXPLAIN (COSTS OFF) SELECT id FROM rdup ORDER BY v <-> '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]' LIMIT 1000;
SELECT count(*) FILTER (WHERE v = '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]') AS copies, count(*) AS rows
FROM (SELECT v FROM rdup ORDER BY v <-> '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]' LIMIT 1000) s;
-- a query near them: the copies, then the rest in order
CREATE FUNCTION out_of_order(query vector, k int) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM (
		SELECT d < lag(d) OVER (ORDER BY n) AS back FROM (
			SELECT row_number() OVER () AS n, d FROM (
				SELECT v <-> query AS d FROM rdup ORDER BY v <-> query LIMIT k) o) s) t
	WHERE back $$;
SELECT out_of_order('[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.51]', 1100) AS out_of_order;
SELECT count(*) FILTER (WHERE v = '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]') AS copies
FROM (SELECT v FROM rdup ORDER BY v <-> '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.51]' LIMIT 1000) s;
-- with no LIMIT: every row, once
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM rdup ORDER BY v <-> '[0.1,0.9,0.1,0.9,0.1,0.9,0.1,0.9]') s;

-- inner product over norms from 0.01 to 100
CREATE TABLE rip (id int, v vector(8));
INSERT INTO rip SELECT i, (SELECT array_agg((random() - 0.5) * p.scale)::real[]
	FROM generate_series(1, 8), (SELECT power(10, -2 + 4 * (i % 97) / 96.0) AS scale) p)::vector
	FROM generate_series(1, 10000) i;
CREATE INDEX rip_v ON rip USING tsdg (v vector_ip_ops);
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM rip ORDER BY v <#> '[1,-1,1,-1,1,-1,1,-1]') s;
SELECT count(*) AS rows FROM (
	SELECT id FROM rip WHERE id % 200 = 7 ORDER BY v <#> '[1,-1,1,-1,1,-1,1,-1]' LIMIT 10) s;
-- the nearest row passes the filter: it comes first
SELECT id = (SELECT id FROM rip WHERE id % 200 = 7 ORDER BY (v <#> '[1,-1,1,-1,1,-1,1,-1]') + 0 LIMIT 1) AS nearest_first
FROM (SELECT id FROM rip WHERE id % 200 = 7 ORDER BY v <#> '[1,-1,1,-1,1,-1,1,-1]' LIMIT 1) s;

-- L1: the copies first, all of them
CREATE INDEX rdup_l1 ON rdup USING tsdg (v vector_l1_ops);
SELECT count(*) FILTER (WHERE v = '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]') AS copies, count(*) AS rows
FROM (SELECT v FROM rdup ORDER BY v <+> '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]' LIMIT 1000) s;
-- L1 over values up to 3e38, whose distances pass the float range
-- (Infinity): every row, once, and the nearest in the exact order
CREATE TABLE rl1 (id int, v vector(4));
INSERT INTO rl1 SELECT i, ARRAY[(i % 7) * 1e37 * (i % 2 * 2 - 1), i % 13, sin(i), 3e38 * (i % 3 - 1)]::real[]::vector
	FROM generate_series(1, 3000) i;
CREATE INDEX rl1_v ON rl1 USING tsdg (v vector_l1_ops);
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM rl1 ORDER BY v <+> '[0,5,0,0]') s;
SELECT count(*) FILTER (WHERE d = 'Infinity') AS infinite FROM (SELECT v <+> '[0,5,0,0]' AS d FROM rl1) s;
SELECT array_agg(id) = (SELECT array_agg(id) FROM (SELECT id FROM rl1
		ORDER BY (v <+> '[0,5,0,0]') + 0, id LIMIT 10) e) AS nearest_exact
	FROM (SELECT id FROM rl1 ORDER BY v <+> '[0,5,0,0]' LIMIT 10) i;

RESET enable_seqscan;
DROP TABLE rdup, rip, rl1;
DROP FUNCTION out_of_order(vector, int);
