-- What a role may learn through pg_tsdg's functions: nothing about a table
-- it may not read, and nothing about rows a row-level security policy hides
-- from it (the batch searches answer from the graph, before any row is
-- read, so they refuse a table whose policies apply to the caller).
SET client_min_messages = warning;

CREATE ROLE regress_tsdg_owner;
CREATE ROLE regress_tsdg_stranger;
CREATE ROLE regress_tsdg_column;
CREATE ROLE regress_tsdg_policed;
GRANT CREATE ON SCHEMA public TO regress_tsdg_owner;

SET ROLE regress_tsdg_owner;
CREATE TABLE secret (id int, owner text, v vector(3));
INSERT INTO secret SELECT i, CASE WHEN i % 2 = 0 THEN 'regress_tsdg_policed' ELSE 'other' END,
	ARRAY[i, i % 7, i % 3]::real[]::vector FROM generate_series(1, 200) i;
CREATE INDEX secret_idx ON secret USING tsdg (v vector_l2_ops);
GRANT SELECT (id) ON secret TO regress_tsdg_column;
GRANT SELECT ON secret TO regress_tsdg_policed;
CREATE POLICY own_rows ON secret FOR SELECT USING (owner = current_user);
-- the owner sees every row
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET ROLE;

-- no privilege on the table: every function refuses before it locks anything
SET ROLE regress_tsdg_stranger;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
SELECT count(*) FROM tsdg_search_batch_arrays('secret_idx', ARRAY['[3,3,0]'::vector], 5);
SELECT rows FROM tsdg_index_info('secret_idx');
SELECT tsdg_merge('secret_idx');
-- and the worker's status lists no index of the table
SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
	WHERE c->>'index' = 'secret_idx';
RESET ROLE;

-- SELECT on another column only is not enough
SET ROLE regress_tsdg_column;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET ROLE;
GRANT SELECT (v) ON secret TO regress_tsdg_column;
SET ROLE regress_tsdg_column;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET ROLE;

-- before RLS is enabled a reader searches every row; after, it is refused
-- (an index scan applies the policy and finds only its own rows)
SET ROLE regress_tsdg_policed;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET ROLE;
ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
SET ROLE regress_tsdg_policed;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
SELECT count(*) FROM tsdg_search_batch_arrays('secret_idx', ARRAY['[3,3,0]'::vector], 5);
SET enable_seqscan = off;
SELECT array_agg(owner) = array_fill('regress_tsdg_policed'::text, ARRAY[5]) AS only_own_rows
	FROM (SELECT owner FROM secret ORDER BY v <-> '[3,3,0]' LIMIT 5) s;
RESET enable_seqscan;
-- with row_security off the policy cannot be bypassed either
SET row_security = off;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET row_security;
RESET ROLE;
-- the owner is not subject to its own policies unless they are forced
SET ROLE regress_tsdg_owner;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
ALTER TABLE secret FORCE ROW LEVEL SECURITY;
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);
RESET ROLE;

-- a superuser bypasses row-level security, as with any query
SELECT count(*) FROM tsdg_search_batch('secret_idx', ARRAY['[3,3,0]'::vector], 5);

DROP TABLE secret;
REVOKE CREATE ON SCHEMA public FROM regress_tsdg_owner;
DROP ROLE regress_tsdg_owner;
DROP ROLE regress_tsdg_stranger;
DROP ROLE regress_tsdg_column;
DROP ROLE regress_tsdg_policed;
