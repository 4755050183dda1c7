-- The tsdg access method: CREATE INDEX, options, operator classes, NULLs,
-- dimension errors, REINDEX, unlogged tables, tsdg_index_info.
SET client_min_messages = warning;

CREATE TABLE tb (id int, v vector(3));
INSERT INTO tb SELECT i, ARRAY[i % 13, (i * 7) % 11, i / 50.0]::real[]::vector
	FROM generate_series(1, 600) i;
INSERT INTO tb VALUES (601, NULL), (602, NULL);

-- every operator class builds; NULL rows are not indexed
CREATE INDEX tb_l2 ON tb USING tsdg (v vector_l2_ops);
CREATE INDEX tb_ip ON tb USING tsdg (v vector_ip_ops);
CREATE INDEX tb_cos ON tb USING tsdg (v vector_cosine_ops);
CREATE INDEX tb_l1 ON tb USING tsdg (v vector_l1_ops);
SELECT rows, pending, deleted, degree, graph_version, dims, metric, build_k, samples,
	iterations, alpha, lambda0, entry_points > 0 AS has_entry_points, size > 8192 AS has_pages
	FROM tsdg_index_info('tb_l2');
SELECT metric, rows FROM tsdg_index_info('tb_ip');
SELECT metric, rows FROM tsdg_index_info('tb_cos');
SELECT metric, rows FROM tsdg_index_info('tb_l1');

-- options, in range and out
CREATE INDEX tb_opts ON tb USING tsdg (v vector_l2_ops)
	WITH (degree = 16, build_k = 24, samples = 8, iterations = 4, alpha = 1.1, lambda0 = 3);
SELECT degree, build_k, samples, iterations, alpha, lambda0 FROM tsdg_index_info('tb_opts');
DROP INDEX tb_opts;
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (degree = 3);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (degree = 129);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (build_k = 1000);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (samples = -1);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (iterations = 0);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (alpha = 0.9);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (lambda0 = 255);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (lambda0 = 'many');
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (build_k = 8, samples = 16);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops) WITH (ef_search = 10);
CREATE INDEX ON tb USING tsdg (v);
CREATE INDEX ON tb USING tsdg (id);
CREATE INDEX ON tb USING tsdg (v vector_l2_ops, v vector_l2_ops);

-- GUCs: ranges and the reserved prefix
SET tsdg.ef_search = 0;
SET tsdg.ef_search = 40;
SHOW tsdg.ef_search;
RESET tsdg.ef_search;
SET tsdg.lambda_search = 256;
SET tsdg.max_scan_tuples = 0;
SET tsdg.ef_search = 1001;
SHOW tsdg.iterative_scan;
SET tsdg.iterative_scan = on;
SHOW tsdg.scan_mem_multiplier;
SET tsdg.scan_mem_multiplier = 1001;
SET tsdg.device = 'tpu';
SET tsdg.device = 'cpu';
SET tsdg.no_such_setting = 1;
RESET tsdg.device;

-- a column without a declared dimension takes the first row's; other
-- dimensions are errors naming both
CREATE TABLE tfree (id int, v vector);
INSERT INTO tfree VALUES (1, '[1,2,3]'), (2, '[1,2]');
CREATE INDEX ON tfree USING tsdg (v vector_l2_ops);
DELETE FROM tfree WHERE id = 2;
CREATE INDEX tfree_idx ON tfree USING tsdg (v vector_l2_ops);
INSERT INTO tfree VALUES (3, '[4,5,6,7]');
SELECT dims, rows FROM tsdg_index_info('tfree_idx');
-- an empty column without typmod: the first insert fixes the dimension
TRUNCATE tfree;
SELECT dims, rows, pending FROM tsdg_index_info('tfree_idx');
INSERT INTO tfree VALUES (4, '[1,1]');
INSERT INTO tfree VALUES (5, '[1,1,1]');
SELECT dims, rows, pending FROM tsdg_index_info('tfree_idx');

-- too many dimensions for a row record on one page, whatever the degree
CREATE TABLE twide (v vector(2039));
CREATE INDEX ON twide USING tsdg (v vector_l2_ops);
CREATE TABLE twide2 (v vector(2038));
INSERT INTO twide2 SELECT array_fill(i::real, ARRAY[2038])::vector FROM generate_series(1, 3) i;
CREATE INDEX twide2_idx ON twide2 USING tsdg (v vector_l2_ops) WITH (degree = 128);
SELECT dims FROM tsdg_index_info('twide2_idx');
SELECT count(*) FROM (SELECT v FROM twide2 ORDER BY v <-> array_fill(2::real, ARRAY[2038])::vector LIMIT 3) s;
-- a column without dimensions: the first row inserted is checked
CREATE TABLE twide3 (v vector);
CREATE INDEX twide3_idx ON twide3 USING tsdg (v vector_l2_ops);
INSERT INTO twide3 SELECT array_fill(1::real, ARRAY[2039])::vector;
INSERT INTO twide3 SELECT array_fill(1::real, ARRAY[2038])::vector;
SELECT pending, dims FROM tsdg_index_info('twide3_idx');

-- cosine skips zero vectors, which have no direction
CREATE TABLE tzero (id int, v vector(2));
INSERT INTO tzero VALUES (1, '[0,0]'), (2, '[1,0]'), (3, '[0,1]');
CREATE INDEX tzero_cos ON tzero USING tsdg (v vector_cosine_ops);
CREATE INDEX tzero_l2 ON tzero USING tsdg (v vector_l2_ops);
INSERT INTO tzero VALUES (4, '[0,0]');
SELECT metric, rows, pending FROM tsdg_index_info('tzero_cos');
SELECT metric, rows, pending FROM tsdg_index_info('tzero_l2');

-- a build past maintenance_work_mem says so and goes on in temporary files
-- (in the session: the GPU worker's build keeps loading into its segment)
CREATE TABLE tmem (v vector(3));
INSERT INTO tmem SELECT ARRAY[i, i % 7, i % 11]::real[]::vector FROM generate_series(1, 2000) i;
ANALYZE tmem;
SET maintenance_work_mem = '1MB';
SET tsdg.device = cpu;
SET client_min_messages = notice;
CREATE INDEX tmem_v ON tmem USING tsdg (v vector_l2_ops) WITH (degree = 32, build_k = 64);
SET client_min_messages = warning;
RESET tsdg.device;
RESET maintenance_work_mem;
SELECT rows, pending FROM tsdg_index_info('tmem_v');
SET enable_seqscan = off;
SELECT v FROM tmem ORDER BY v <-> '[1000,6,10]' LIMIT 3;
SELECT count(*) FROM (SELECT v FROM tmem ORDER BY v <-> '[0,0,0]') s;
RESET enable_seqscan;

-- an empty table
CREATE TABLE tempty (v vector(4));
CREATE INDEX tempty_idx ON tempty USING tsdg (v vector_l2_ops);
SELECT rows, pending, graph_version, dims FROM tsdg_index_info('tempty_idx');
SELECT * FROM tempty ORDER BY v <-> '[1,2,3,4]' LIMIT 1;

-- REINDEX rebuilds the graph from the heap, pending rows included
INSERT INTO tb SELECT i, ARRAY[i % 13, (i * 7) % 11, i / 50.0]::real[]::vector
	FROM generate_series(603, 650) i;
SELECT rows, pending FROM tsdg_index_info('tb_l2');
REINDEX INDEX tb_l2;
SELECT rows, pending, graph_version FROM tsdg_index_info('tb_l2');

-- unlogged tables get an init fork, so an index survives as empty after a crash
CREATE UNLOGGED TABLE tunlogged (id int, v vector(2));
INSERT INTO tunlogged SELECT i, ARRAY[i, i % 7]::real[]::vector FROM generate_series(1, 100) i;
CREATE INDEX tunlogged_idx ON tunlogged USING tsdg (v vector_l2_ops);
SELECT relpersistence FROM pg_class WHERE relname = 'tunlogged_idx';
SELECT rows FROM tsdg_index_info('tunlogged_idx');
SET enable_seqscan = off;
SELECT id FROM tunlogged ORDER BY v <-> '[50,3]' LIMIT 3;
RESET enable_seqscan;

-- tsdg_index_info wants a tsdg index
SELECT * FROM tsdg_index_info('tb');
CREATE INDEX tb_btree ON tb (id);
SELECT * FROM tsdg_index_info('tb_btree');

DROP TABLE tb, tfree, twide, twide2, twide3, tzero, tmem, tempty, tunlogged;
