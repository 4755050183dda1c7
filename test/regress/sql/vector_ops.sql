-- Operators, functions and aggregates of the vector type.

-- distances
SELECT '[1,2,3]'::vector <-> '[3,2,1]', l2_distance('[1,2,3]', '[3,2,1]');
SELECT '[0,0]'::vector <-> '[3,4]';
SELECT '[1,2,3]'::vector <#> '[3,2,1]', inner_product('[1,2,3]', '[3,2,1]');
SELECT '[1,2]'::vector <=> '[2,4]', cosine_distance('[1,2]', '[2,4]');
SELECT '[1,2]'::vector <=> '[-1,-2]', '[1,0]'::vector <=> '[0,1]';
SELECT '[1,1]'::vector <=> '[1,0]';
SELECT '[0,0]'::vector <=> '[1,2]' AS zero_vector_cosine;
SELECT '[1,2,3]'::vector <+> '[3,2,-1]', l1_distance('[1,2,3]', '[3,2,-1]');
SELECT vector_l2_squared_distance('[1,2,3]', '[3,2,1]');
SELECT vector_negative_inner_product('[1,2,3]', '[3,2,1]');
-- long vectors go through every SIMD path: compare with a double-precision sum
WITH v AS (
  SELECT array_agg(sin(g)::real ORDER BY g) AS a, array_agg(cos(g)::real ORDER BY g) AS b
  FROM generate_series(1, 1537) g
), naive AS (
  SELECT sum((x - y)::float8 ^ 2) AS l2sq, sum(x::float8 * y) AS ip, sum(abs(x::float8 - y)) AS l1,
         sum(x::float8 ^ 2) AS na, sum(y::float8 ^ 2) AS nb
  FROM v, unnest(a, b) AS u(x, y)
)
SELECT abs((a::vector <-> b::vector) - sqrt(l2sq)) / sqrt(l2sq) < 1e-5 AS l2_ok,
       abs(inner_product(a::vector, b::vector) - ip) / sqrt(na * nb) < 1e-5 AS ip_ok,
       abs(l1_distance(a::vector, b::vector) - l1) / l1 < 1e-5 AS l1_ok,
       abs((a::vector <=> b::vector) - (1 - ip / sqrt(na * nb))) < 1e-5 AS cosine_ok,
       abs(l2_norm(a::vector) - sqrt(na)) / sqrt(na) < 1e-5 AS norm_ok
FROM v, naive;
-- dimension mismatch
SELECT '[1,2]'::vector <-> '[1,2,3]';
SELECT '[1,2]'::vector <#> '[1,2,3]';
SELECT '[1,2]'::vector <=> '[1,2,3]';
SELECT '[1,2]'::vector <+> '[1,2,3]';
SELECT l2_distance('[1,2]', '[1,2,3]');
SELECT inner_product('[1,2]', '[1,2,3]');
SELECT cosine_distance('[1,2]', '[1,2,3]');
SELECT l1_distance('[1,2]', '[1,2,3]');

-- element-wise arithmetic
SELECT '[1,2,3]'::vector + '[4,5,6]';
SELECT '[1,2,3]'::vector - '[4,5,6]';
SELECT '[1,2,3]'::vector * '[4,5,6]';
SELECT '[1,2]'::vector + '[1,2,3]';
SELECT '[1,2]'::vector - '[1,2,3]';
SELECT '[1,2]'::vector * '[1,2,3]';
SELECT '[3e38]'::vector + '[3e38]';
SELECT '[-3e38]'::vector - '[3e38]';
SELECT '[1e20]'::vector * '[1e20]';
SELECT '[1e-30]'::vector * '[1e-30]';

-- functions
SELECT vector_dims('[1,2,3]');
SELECT l2_norm('[3,4]'), vector_norm('[3,4]');
SELECT l2_norm('[0,0]');
SELECT l2_normalize('[3,4]');
SELECT l2_normalize('[0,0]');
SELECT l2_norm(l2_normalize('[1,2,3,4,5]'));
SELECT subvector('[1,2,3,4,5]', 2, 3);
SELECT subvector('[1,2,3,4,5]', 4, 10);
SELECT subvector('[1,2,3,4,5]', -1, 3);
SELECT subvector('[1,2,3,4,5]', 1, 2147483647);
SELECT subvector('[1,2,3,4,5]', 6, 1);
SELECT subvector('[1,2,3,4,5]', 2, 0);
SELECT subvector('[1,2,3,4,5]', -3, 3);

-- comparison operators and the btree opclass
SELECT '[1,2,3]'::vector < '[1,2,4]', '[1,2,3]'::vector <= '[1,2,3]',
       '[1,2,3]'::vector = '[1,2,3]', '[1,2,3]'::vector <> '[1,2,3]',
       '[1,2,4]'::vector >= '[1,2,3]', '[1,2,4]'::vector > '[1,2,3]';
SELECT '[1,2]'::vector < '[1,2,3]' AS shorter_first, '[2]'::vector > '[1,2,3]' AS first_element_decides;
SELECT '[1,2]'::vector = '[1,2,3]';
CREATE TABLE vector_sort (id int, v vector);
INSERT INTO vector_sort VALUES (1, '[3,1]'), (2, '[1,2,3]'), (3, '[1,2]'), (4, '[-1,5]'), (5, '[1,2]');
SELECT id, v FROM vector_sort ORDER BY v, id;
SELECT DISTINCT v FROM vector_sort ORDER BY v;
CREATE INDEX ON vector_sort USING btree (v);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM vector_sort WHERE v = '[1,2]';
SELECT id FROM vector_sort WHERE v = '[1,2]' ORDER BY id;
SELECT id FROM vector_sort WHERE v > '[1,2]' ORDER BY v;
RESET enable_seqscan;
SELECT opcname, opcdefault FROM pg_opclass WHERE opcname = 'vector_ops';

-- aggregates
CREATE TABLE vector_agg (g int, v vector(3));
INSERT INTO vector_agg VALUES (1, '[1,2,3]'), (1, '[3,4,5]'), (2, '[-1,0,1]'), (2, NULL);
SELECT avg(v), sum(v) FROM vector_agg;
SELECT g, avg(v), sum(v) FROM vector_agg GROUP BY g ORDER BY g;
SELECT avg(v), sum(v) FROM vector_agg WHERE false;
SELECT avg(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);
SELECT sum(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);
SELECT avg(v) FROM (VALUES ('[3e38]'::vector), ('[3e38]')) t(v);
SELECT avg(v) FROM (VALUES ('[3.4e38]'::vector), ('[3.4e38]'), ('[3.4e38]')) t(v);
SELECT sum(v) FROM (VALUES ('[3e38]'::vector), ('[3e38]')) t(v);
-- parallel aggregation: partial states merged by the combine functions
CREATE TABLE vector_parallel AS
  SELECT ARRAY[g % 7, g % 3, 1]::vector(3) AS v FROM generate_series(1, 30000) g;
ANALYZE vector_parallel;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT avg(v), sum(v) FROM vector_parallel;
SELECT avg(v), sum(v) FROM vector_parallel;
-- no row: the finalizing step combines the empty state it starts from with
-- the empty partial states, which is no error
EXPLAIN (COSTS OFF) SELECT avg(v), sum(v) FROM vector_parallel WHERE v <-> '[100,100,100]' < 1;
SELECT avg(v), sum(v) FROM vector_parallel WHERE v <-> '[100,100,100]' < 1;
SELECT vector_combine('{0}', '{0}');
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
DROP TABLE vector_sort, vector_agg, vector_parallel;
