-- Binary I/O: send/recv through COPY (FORMAT binary), and bad binary input.
CREATE TABLE vector_copy_src (id int, v vector);
INSERT INTO vector_copy_src VALUES (1, '[1,2,3]'), (2, '[-0.5,1e-7,3.4028235e38]'), (3, NULL),
  (4, ('[' || array_to_string(array_fill(0.25, ARRAY[2000]), ',') || ']')::vector);
SELECT vector_send('[1,2,3]'::vector);
\copy vector_copy_src TO 'results/vector_copy.bin' WITH (FORMAT binary)
CREATE TABLE vector_copy_dst (id int, v vector);
\copy vector_copy_dst FROM 'results/vector_copy.bin' WITH (FORMAT binary)
SELECT s.id, s.v IS NOT DISTINCT FROM d.v AS same, vector_dims(d.v)
  FROM vector_copy_src s JOIN vector_copy_dst d USING (id) ORDER BY id;
-- recv enforces the typmod of the target column
CREATE TABLE vector_copy_typmod (id int, v vector(3));
\copy vector_copy_typmod FROM 'results/vector_copy.bin' WITH (FORMAT binary)
-- bad binary input: the binary COPY of one bytea column is framed exactly
-- like that of one vector column, so each payload below reaches vector_recv
CREATE TABLE vector_copy_bad (v vector);
\copy (SELECT '\x0001000100000000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x000200003f8000007fc00000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x000100007f800000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x00000000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x3e810000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x000200003f800000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
\copy (SELECT '\x000100003f80000000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
-- and a good one, to show the framing is right
\copy (SELECT '\x000200003f80000040000000'::bytea) TO 'results/vector_bad.bin' WITH (FORMAT binary)
\copy vector_copy_bad FROM 'results/vector_bad.bin' WITH (FORMAT binary)
SELECT v FROM vector_copy_bad;
DROP TABLE vector_copy_src, vector_copy_dst, vector_copy_typmod, vector_copy_bad;
