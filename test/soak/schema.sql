-- One soak database: ROWS rows of hard data (100 clusters, each on a
-- 16-dimension window of its own of the 64, neighbouring clusters sharing
-- part of theirs, each with its own centre), 1,000 queries drawn from the
-- same clusters, and a tsdg index. psql variable: rows.
CREATE EXTENSION IF NOT EXISTS pg_tsdg CASCADE;
CREATE EXTENSION IF NOT EXISTS amcheck;

CREATE FUNCTION soak_vector(c int) RETURNS vector(64) LANGUAGE sql VOLATILE AS $$
	SELECT array_agg(CASE WHEN (d + c * 7) % 64 < 16
			THEN ((c * 13 + d) % 10) * 0.2 + random() ELSE random() * 0.02 END ORDER BY d)::vector(64)
	FROM generate_series(0, 63) AS d $$;

-- autovacuum comes often, so that its merges run beside the explicit ones
CREATE TABLE items (id bigserial PRIMARY KEY, c int NOT NULL, v vector(64) NOT NULL)
	WITH (autovacuum_vacuum_threshold = 200, autovacuum_vacuum_scale_factor = 0.01,
		autovacuum_vacuum_insert_threshold = 200, autovacuum_vacuum_insert_scale_factor = 0.01);
INSERT INTO items (c, v) SELECT i % 100, soak_vector(i % 100) FROM generate_series(1, :rows) AS i;
CREATE TABLE queries AS SELECT qid, soak_vector(qid % 100) AS v FROM generate_series(1, 1000) AS qid;
ALTER TABLE queries ADD PRIMARY KEY (qid);
CREATE INDEX items_v_idx ON items USING tsdg (v vector_l2_ops);
ANALYZE;
