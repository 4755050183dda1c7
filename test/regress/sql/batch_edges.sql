-- tsdg_search_batch at its edges: many deleted rows near the queries (not
-- merged yet), a partitioned index, bad k, queries of other dimensions.
SET client_min_messages = warning;
SET tsdg.device = cpu;
SET tsdg.merge_threshold = 1000000;

CREATE TABLE be (id int, v vector(4));
INSERT INTO be SELECT i, ARRAY[i, 0, 0, 0]::real[]::vector FROM generate_series(1, 600) i;
CREATE INDEX be_idx ON be USING tsdg (v vector_l2_ops);
-- the 200 rows nearest the query go; VACUUM flags their nodes deleted and
-- leaves them in the graph (below the merge threshold)
DELETE FROM be WHERE id <= 200;
VACUUM be;
SELECT rows, deleted FROM tsdg_index_info('be_idx');
-- every query still gets its k rows, the nearest live ones
SELECT count(*) AS found, min(b.id) AS nearest, max(b.id) AS farthest
	FROM tsdg_search_batch('be_idx', ARRAY['[0,0,0,0]'::vector, '[1,0,0,0]'::vector], 10) s
	JOIN be b ON b.ctid = s.tid;
SELECT query, cardinality(tids) AS found
	FROM tsdg_search_batch_arrays('be_idx', ARRAY['[0,0,0,0]'::vector, '[150,0,0,0]'::vector], 25);

-- bad calls
SELECT count(*) FROM tsdg_search_batch('be_idx', ARRAY['[0,0,0]'::vector], 10);
SELECT count(*) FROM tsdg_search_batch('be_idx', ARRAY['[0,0,0,0]'::vector], 0);
SELECT count(*) FROM tsdg_search_batch('be_idx', ARRAY['[0,0,0,0]'::vector], 1001);
SELECT count(*) FROM tsdg_search_batch('be', ARRAY['[0,0,0,0]'::vector], 10);
SELECT count(*) FROM tsdg_search_batch_arrays('be_idx', ARRAY[NULL::vector], 10);
SELECT count(*) FROM tsdg_search_batch('be_idx', '{}', 10);

-- a partitioned index is refused clearly; its partitions' indexes answer
CREATE TABLE bp (id int, v vector(4)) PARTITION BY RANGE (id);
CREATE TABLE bp_1 PARTITION OF bp FOR VALUES FROM (0) TO (1000);
INSERT INTO bp SELECT id, v FROM be;
CREATE INDEX bp_idx ON bp USING tsdg (v vector_l2_ops);
SELECT count(*) FROM tsdg_search_batch('bp_idx', ARRAY['[0,0,0,0]'::vector], 10);
SELECT rows FROM tsdg_index_info('bp_idx');
SELECT count(*) FROM tsdg_search_batch('bp_1_v_idx', ARRAY['[0,0,0,0]'::vector], 10);
SELECT rows FROM tsdg_index_info('bp_1_v_idx');

DROP TABLE be, bp;
