-- Values no function may make: vectors of no dimension, of more than 16000,
-- or from aggregate states built by hand. Every one is a clean ERROR, and an
-- index is never built or filled from one.
SET client_min_messages = warning;

-- avg()'s final function is callable on any float8[]
SELECT vector_avg('{1}');
SELECT vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[65535]));
SELECT vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[16001]));
SELECT vector_dims(vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[16000])));
SELECT vector_avg('{0}') IS NULL AS no_rows;
SELECT vector_avg('{0,5,6}') IS NULL AS no_rows_any_sums;
SELECT vector_avg('{2,4,6}');
SELECT vector_avg('{-1,2}');
SELECT vector_avg('{1.5,2}');
SELECT vector_avg('{NaN,2}');
SELECT vector_avg('{Infinity,2}');
SELECT vector_avg('{1,NaN}');
SELECT vector_avg('{{1,2},{3,4}}');
SELECT vector_avg('{1,NULL}');
SELECT vector_avg('{}');

-- the state functions, likewise
SELECT vector_accum('{0}', '[1,2]');
SELECT vector_accum('{1,1}', '[1]');
SELECT vector_accum('{1}', '[1]');
SELECT vector_accum('{1,1}', '[1,2]');
SELECT vector_accum('{-3,1}', '[1]');
SELECT vector_combine('{0}', '{2,4,6}');
SELECT vector_combine('{2,4,6}', '{0}');
SELECT vector_combine('{1,2}', '{2,3,4}');
SELECT vector_combine('{1}', '{1,2}');
SELECT vector_combine(ARRAY[1::float8] || array_fill(0::float8, ARRAY[16001]), '{0}');
SELECT vector_avg(vector_combine('{1,1e308}', '{1,1e308}'));

-- concatenation: a vector, not text
SELECT '[1,2,3]'::vector || '[4,5]';
SELECT pg_typeof('[1,2,3]'::vector || '[4,5]'::vector);
SELECT vector_dims(('[' || array_to_string(array_fill(1, ARRAY[8000]), ',') || ']')::vector ||
	('[' || array_to_string(array_fill(1, ARRAY[8000]), ',') || ']')::vector);
SELECT ('[' || array_to_string(array_fill(1, ARRAY[8000]), ',') || ']')::vector ||
	('[' || array_to_string(array_fill(1, ARRAY[8001]), ',') || ']')::vector;

-- norms summed in double: no overflow to infinity below float's range
SELECT vector_norm('[3e37,4e37]')::real;
SELECT l2_norm('[3e38,3e38]')::real;
SELECT l2_normalize('[3e38]');
SELECT l2_normalize('[3e38,-3e38]');
SELECT l2_normalize('[1e-38,1e-38]');
SELECT l2_normalize('[0,0]');
-- cosine of vectors whose squared norms overflow float
SELECT cosine_distance('[1e20,0]', '[1,0]');
SELECT cosine_distance('[1e20,1e20]', '[-1e20,-1e20]');
SELECT '[3e38,1]'::vector <=> '[3e38,1]'::vector;
SELECT round(cosine_distance('[1e30,0]', '[0,1e30]')::numeric, 6);
SELECT cosine_distance('[0,0]', '[1e30,0]');

-- the reproduction of a server crash: a first row of no dimension or of -1
-- (its int16 count wrapped), then an index built over the table
CREATE TEMP TABLE bad_first (v vector);
INSERT INTO bad_first SELECT vector_avg('{1}'::float8[]);
INSERT INTO bad_first SELECT vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[65535]));
INSERT INTO bad_first SELECT ('[' || g || ',1,2,3,4,5,6,7]')::vector FROM generate_series(1, 300) g;
SELECT count(*), min(vector_dims(v)), max(vector_dims(v)) FROM bad_first;
SET tsdg.device = cpu;
CREATE INDEX bad_first_idx ON bad_first USING tsdg (v vector_l2_ops);
SELECT dims, rows FROM tsdg_index_info('bad_first_idx');
-- rows of other dimensions than the index's: refused on insert and build
INSERT INTO bad_first VALUES ('[1,2]');
INSERT INTO bad_first SELECT '[1,2,3,4,5,6,7,8]'::vector || '[9]';
DROP INDEX bad_first_idx;
INSERT INTO bad_first VALUES ('[1,2]');
CREATE INDEX bad_first_idx ON bad_first USING tsdg (v vector_l2_ops);
DROP TABLE bad_first;
