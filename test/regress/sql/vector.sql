-- The vector type: text I/O, typmod, casts, and every bad input.

-- text form, read and printed like pgvector: shortest round-trip floats
SELECT '[1,2,3]'::vector;
SELECT '[-1.5, 0, 2.25e3]'::vector;
SELECT ' [ 1 ,	2 , 3 ] '::vector;
SELECT '[1e-7,3.4028235e38,-3.4028235e38]'::vector;
SELECT '[0.1,0.2,0.3]'::vector;
SELECT '[1.00000001,123456789]'::vector;
SELECT '[-0]'::vector;
SELECT '[1,2,3]'::vector::text::vector = '[1,2,3]'::vector AS round_trip;
-- the text of a random float reads back as the same float
SELECT count(*) AS not_round_tripped FROM (
  SELECT array_agg(random()::real) AS a FROM generate_series(1, 2000) g GROUP BY g % 10
) s WHERE a::vector::text::vector::real[] <> a;

-- malformed text
SELECT '[1,,2]'::vector;
SELECT '[1,2'::vector;
SELECT '1,2'::vector;
SELECT '[]'::vector;
SELECT '[ ]'::vector;
SELECT ''::vector;
SELECT '['::vector;
SELECT '[1,]'::vector;
SELECT '[,1]'::vector;
SELECT '[1 2]'::vector;
SELECT '[1,2]x'::vector;
SELECT '[a]'::vector;
SELECT '[1,2],'::vector;

-- NaN, infinity and out of range values
SELECT '[NaN]'::vector;
SELECT '[1,Infinity]'::vector;
SELECT '[-inf]'::vector;
SELECT '[1e39]'::vector;
SELECT '[4e38,1]'::vector;

-- dimensions: 16000 at most
SELECT vector_dims(('[' || array_to_string(array_fill(1, ARRAY[16000]), ',') || ']')::vector);
SELECT ('[' || array_to_string(array_fill(1, ARRAY[16001]), ',') || ']')::vector;

-- typmod vector(n)
SELECT '[1,2,3]'::vector(3);
SELECT '[1,2]'::vector(3);
SELECT '[1,2,3]'::vector(3)::vector(2);
SELECT '[1]'::vector(0);
SELECT '[1]'::vector(16001);
SELECT '[1]'::vector(2, 3);
CREATE TABLE vector_typmod (v vector(3));
INSERT INTO vector_typmod VALUES ('[1,2,3]');
INSERT INTO vector_typmod VALUES ('[1,2]');
INSERT INTO vector_typmod VALUES ('[1,2,3]'::vector);
INSERT INTO vector_typmod VALUES ('[1,2,3,4]'::vector);
INSERT INTO vector_typmod VALUES (ARRAY[4,5,6]);
INSERT INTO vector_typmod VALUES (ARRAY[4,5]);
SELECT v, pg_typeof(v), format_type(atttypid, atttypmod)
  FROM vector_typmod, pg_attribute
  WHERE attrelid = 'vector_typmod'::regclass AND attname = 'v';
DROP TABLE vector_typmod;

-- casts from arrays
SELECT ARRAY[1,2,3]::vector;
SELECT ARRAY[1.5,2.25,-3]::real[]::vector;
SELECT ARRAY[1.5,2.25,-3]::double precision[]::vector;
SELECT ARRAY[1.5,2.25,-3]::numeric[]::vector;
SELECT ARRAY[0.1]::double precision[]::vector;
SELECT ARRAY[1,2,3]::vector(3);
SELECT ARRAY[1,2,3]::vector(2);
SELECT ARRAY[1,NULL,3]::vector;
SELECT ARRAY[1.5,NULL]::real[]::vector;
SELECT ARRAY[[1,2],[3,4]]::vector;
SELECT '{}'::real[]::vector;
SELECT ARRAY['NaN']::real[]::vector;
SELECT ARRAY['Infinity']::double precision[]::vector;
SELECT ARRAY[1e300]::double precision[]::vector;
SELECT ARRAY['NaN']::numeric[]::vector;
SELECT ARRAY[1e39]::numeric[]::vector;
SELECT ARRAY[1,2]::smallint[]::vector;

-- cast to real[]
SELECT '[1,2.5,-3]'::vector::real[];
SELECT pg_typeof('[1,2.5,-3]'::vector::real[]);
SELECT array_length('[1,2,3,4]'::vector::real[], 1);

-- the SQLSTATE of every kind of bad input
CREATE FUNCTION vector_error_code(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
SELECT query, vector_error_code(query) FROM (VALUES
  ('SELECT ''[1,,2]''::vector'),
  ('SELECT ''[1,2''::vector'),
  ('SELECT ''1,2''::vector'),
  ('SELECT ''[]''::vector'),
  ('SELECT ''[NaN]''::vector'),
  ('SELECT ''[Infinity]''::vector'),
  ('SELECT ''[1e39]''::vector'),
  ('SELECT (''['' || repeat(''1,'', 16000) || ''1]'')::vector'),
  ('SELECT ''[1,2]''::vector(3)'),
  ('SELECT ''[1]''::vector(16001)'),
  ('SELECT ''[1,2]''::vector <-> ''[1,2,3]'''),
  ('SELECT ARRAY[1,NULL]::vector'),
  ('SELECT ARRAY[[1]]::vector'),
  ('SELECT ''[3e38]''::vector + ''[3e38]''')
) t(query);
DROP FUNCTION vector_error_code(text);
