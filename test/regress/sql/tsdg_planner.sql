-- The planner's choice for ORDER BY distance: the index wherever it does less
-- work than a sequential scan and a sort, at every ef_search, including wide
-- vectors stored out of line (TOAST), tables larger than the CPU's caches and
-- small tables; a sequential scan where a filter leaves few rows, where
-- ef_search asks the search to score most of a small table, or more rows
-- than a sequential scan computes distances for behind a filter, where work_mem cuts the widened search short, and for an
-- ordered scan of the whole table.
SET client_min_messages = warning;

-- wide vectors, stored out of line: 2,500 rows of 1,536 dimensions
CREATE TABLE pwide (id int, cat int, v vector(1536));
INSERT INTO pwide SELECT i, i % 100,
	(SELECT array_agg(sin(i * 0.37 + j * (1 + i % 7)))::real[] FROM generate_series(1, 1536) j)::vector
	FROM generate_series(1, 2500) i;
CREATE INDEX pwide_v ON pwide USING tsdg (v vector_l2_ops);
ANALYZE pwide;
SELECT pg_relation_size('pwide') < 2500 * 1536 * 4 / 4 AS vectors_out_of_line;
SELECT v AS q FROM pwide WHERE id = 7 \gset
-- the scan that answers a query (COSTS OFF: the plan, not its numbers)
CREATE FUNCTION plan_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
		IF line ~ 'Index Scan|Seq Scan' THEN RETURN regexp_replace(line, '^[ >-]*| on .*$', '', 'g'); END IF;
	END LOOP;
	RETURN NULL;
END $$;
SELECT ef, plan_of('SELECT id FROM pwide ORDER BY v <-> ' || quote_literal(:'q') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 40, 100, 400, 1000]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
-- one row in a hundred: the index would widen its search to a thousand rows
SELECT ef, plan_of('SELECT id FROM pwide WHERE cat = 3 ORDER BY v <-> ' || quote_literal(:'q') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 100]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
-- every row, in order: a sort of the table
RESET tsdg.ef_search;
SELECT plan_of('SELECT id FROM pwide ORDER BY v <-> ' || quote_literal(:'q')) AS plan;

-- narrow vectors: 10,000 rows of 8 dimensions, each row scanned cheaply
CREATE TABLE pnarrow (id int, cat int, v vector(8));
INSERT INTO pnarrow SELECT i, i % 100,
	ARRAY[sin(i), cos(i * 0.3), (i % 17) / 9.0, (i % 5) / 3.0,
		  sin(i * 0.11), cos(i * 0.05), (i % 23) / 11.0, (i % 7) / 4.0]::real[]::vector
	FROM generate_series(1, 10000) i;
CREATE INDEX pnarrow_v ON pnarrow USING tsdg (v vector_l2_ops);
ANALYZE pnarrow;
SELECT ef, plan_of('SELECT id FROM pnarrow ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 40, 100, 1000]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
SELECT ef, plan_of('SELECT id FROM pnarrow WHERE cat = 3 ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 100]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
-- one row in ten: the index's first round at ef_search 100 holds the hundred
-- rows the LIMIT needs; at 700 it scores more than the sequential scan, which
-- computes the distances of the rows that pass alone
SELECT ef, plan_of('SELECT id FROM pnarrow WHERE cat < 10 ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 10') AS plan
FROM unnest(ARRAY[100, 700]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
-- tsdg.iterative_scan = off ends a scan after its first round: one row in a
-- hundred passing, the index costs that round alone, less than the
-- sequential scan; an ordered scan of the whole table still goes to the
-- sort, which returns every row
SET tsdg.iterative_scan = off;
SELECT ef, plan_of('SELECT id FROM pnarrow WHERE cat = 3 ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 10') AS plan
FROM unnest(ARRAY[100]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
SELECT plan_of('SELECT id FROM pnarrow ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]''') AS plan;
RESET tsdg.iterative_scan;
RESET tsdg.ef_search;

-- a small table: 2,000 rows of 64 dimensions, which a sequential scan reads
-- cheaply; the search's navigating set and walks score a small part of it at
-- low ef_search, most of it at high ef_search
CREATE TABLE psmall (id int, v vector(64));
INSERT INTO psmall SELECT i,
	(SELECT array_agg(sin(i * 0.91 + j * (1 + i % 5)))::real[] FROM generate_series(1, 64) j)::vector
	FROM generate_series(1, 2000) i;
CREATE INDEX psmall_v ON psmall USING tsdg (v vector_l2_ops);
ANALYZE psmall;
SELECT v AS qsmall FROM psmall WHERE id = 11 \gset
SELECT ef, plan_of('SELECT id FROM psmall ORDER BY v <-> ' || quote_literal(:'qsmall') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 40, 100, 400, 1000]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
RESET tsdg.ef_search;

-- a table of 100 rows on a few heap pages: at ef_search 10 the search scores
-- the navigating set (every row here, from the session's copy) and reads
-- the ten rows it returns from the heap, which costs less than the
-- sequential scan and its sort as long as those reads are priced once,
-- not again as random page reads; at 40 its expansions outweigh that
CREATE TABLE ptiny (id int, v vector(64));
INSERT INTO ptiny SELECT i,
	(SELECT array_agg(sin(i * 0.91 + j * (1 + i % 5)))::real[] FROM generate_series(1, 64) j)::vector
	FROM generate_series(1, 100) i;
CREATE INDEX ptiny_v ON ptiny USING tsdg (v vector_l2_ops);
ANALYZE ptiny;
SELECT v AS qtiny FROM ptiny WHERE id = 11 \gset
SELECT ef, plan_of('SELECT id FROM ptiny ORDER BY v <-> ' || quote_literal(:'qtiny') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 40]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
RESET tsdg.ef_search;

-- 10,000 rows of 64 dimensions, one row in ten passing the filter: the
-- index at the ef_search whose first round holds the rows the LIMIT needs
-- and at twice that, and below it, where the scan widens its search round
-- after round; the sequential scan of the rows that pass at seven times
-- that
CREATE TABLE pmid AS SELECT i AS id, i % 100 AS cat,
	(SELECT array_agg(sin(i * 0.91 + j * (1 + i % 5)))::real[] FROM generate_series(1, 64) j)::vector(64) AS v
	FROM generate_series(1, 10000) i;
CREATE INDEX pmid_v ON pmid USING tsdg (v vector_l2_ops);
ANALYZE pmid;
SELECT v AS qmid FROM pmid WHERE id = 7 \gset
SELECT ef, plan_of('SELECT id FROM pmid WHERE cat < 10 ORDER BY v <-> ' || quote_literal(:'qmid') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[10, 100, 200, 700]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
-- unfiltered: past an ef_search of a few hundred the search spills out of
-- the groups these rows form and scores a growing share of the table, as
-- the index measures on its own graph: the index at 400 and 700, the
-- sequential scan at 1000
SELECT ef, plan_of('SELECT id FROM pmid ORDER BY v <-> ' || quote_literal(:'qmid') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[400, 700, 1000]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
RESET tsdg.ef_search;

-- 10,000 rows of 384 dimensions stored in line: a heap larger than the
-- CPU's caches, whose vectors a sequential scan reads from memory, so that
-- the index is chosen even where its search scores most of the table, and
-- behind a filter that half the rows pass; the first 3,000 rows, a heap the
-- caches hold, go to the sequential scan at ef_search 700
CREATE TABLE pcache AS SELECT i AS id, i % 100 AS cat,
	(SELECT array_agg(sin(i * 0.37 + j * (1 + i % 7)))::real[] FROM generate_series(1, 384) j)::vector(384) AS v
	FROM generate_series(1, 10000) i;
CREATE INDEX pcache_v ON pcache USING tsdg (v vector_l2_ops);
ANALYZE pcache;
SELECT v AS qcache FROM pcache WHERE id = 7 \gset
SELECT ef, plan_of('SELECT id FROM pcache ORDER BY v <-> ' || quote_literal(:'qcache') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[700, 1000]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
SELECT ef, plan_of('SELECT id FROM pcache WHERE cat < 50 ORDER BY v <-> ' || quote_literal(:'qcache') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[700]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
CREATE TABLE pcached AS SELECT * FROM pcache WHERE id <= 3000;
CREATE INDEX pcached_v ON pcached USING tsdg (v vector_l2_ops);
ANALYZE pcached;
SELECT ef, plan_of('SELECT id FROM pcached ORDER BY v <-> ' || quote_literal(:'qcache') || ' LIMIT 10') AS plan
FROM unnest(ARRAY[400, 700]) ef, LATERAL set_config('tsdg.ef_search', ef::text, false) s;
RESET tsdg.ef_search;

-- the graph search's memory bound: 30,000 rows of 8 dimensions, 400 of them
-- asked for at ef_search 10, which the scan finds by widening its search
-- round after round; at the default work_mem the index, at the smallest
-- (64kB) the sequential scan, since the candidates and visited set of the
-- wider rounds pass it and the scan then scores every row left and sorts
-- them, more work than the sequential scan's bounded sort; a
-- tsdg.scan_mem_multiplier that lifts the bound past the search gives the
-- index back
CREATE TABLE pbound (id int, v vector(8));
INSERT INTO pbound SELECT i,
	ARRAY[sin(i), cos(i * 0.3), (i % 17) / 9.0, (i % 5) / 3.0,
		  sin(i * 0.11), cos(i * 0.05), (i % 23) / 11.0, (i % 7) / 4.0]::real[]::vector
	FROM generate_series(1, 30000) i;
CREATE INDEX pbound_v ON pbound USING tsdg (v vector_l2_ops);
ANALYZE pbound;
SET tsdg.ef_search = 10;
SELECT mem, plan_of('SELECT id FROM pbound ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 400') AS plan
FROM unnest(ARRAY['4MB', '64kB']) mem, LATERAL set_config('work_mem', mem, false) s;
SET tsdg.scan_mem_multiplier = 64;
SELECT plan_of('SELECT id FROM pbound ORDER BY v <-> ''[0,1,0.5,0.5,0,1,1,0.5]'' LIMIT 400') AS plan;
RESET tsdg.scan_mem_multiplier;
RESET work_mem;
RESET tsdg.ef_search;

DROP TABLE pwide, pnarrow, psmall, ptiny, pmid, pcache, pcached, pbound;
DROP FUNCTION plan_of(text);
