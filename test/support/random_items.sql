-- The tables of the crash and replica script tests: :rows random 16-dim rows
-- and 10 random queries, drawn after setseed(:seed) so a run is repeatable.
CREATE EXTENSION pg_tsdg CASCADE;
SELECT setseed(:seed) \g /dev/null
CREATE TABLE items (id int, v vector(16));
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, :rows) i;
CREATE TABLE queries (id int, v vector(16));
INSERT INTO queries SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, 10) i;
