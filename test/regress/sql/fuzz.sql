-- Seeded fuzzing of every SQL-callable function and operator of the
-- extension with bad vectors, bad arrays, bad sizes and bad option values.
-- Each call may fail, but only with an error a user can act on: never a
-- crash (the suite would lose its connection), never an internal-error
-- SQLSTATE (class XX) and never a system error (class 58, a missing file).
-- A vector any call returns must read back from its text as the same value,
-- so that a dump restores it.
SET client_min_messages = warning;
SELECT setseed(0.28);

-- values of each argument type, hostile ones first
CREATE TABLE fuzz_values (typ regtype, val text);
INSERT INTO fuzz_values (typ, val) VALUES
	('vector', $$'[1]'::vector$$),
	('vector', $$'[1,2,3]'::vector$$),
	('vector', $$'[0,0,0,0,0,0,0,0]'::vector$$),
	('vector', $$'[1,2,3,4,5,6,7,8]'::vector$$),
	('vector', $$'[3e38,-3e38,3e38,-3e38,3e38,-3e38,3e38,-3e38]'::vector$$),
	('vector', $$'[1e-45,1e-45,1e-45,1e-45,1e-45,1e-45,1e-45,1e-45]'::vector$$),
	('vector', $$array_fill(1e20::real, ARRAY[8])::vector$$),
	('vector', $$array_fill(0.5::real, ARRAY[16000])::vector$$),
	('vector', $$array_fill(-2::real, ARRAY[8000])::vector$$),
	('vector', $$NULL::vector$$),
	('double precision[]', $$'{}'::float8[]$$),
	('double precision[]', $$'{0}'::float8[]$$),
	('double precision[]', $$'{1}'::float8[]$$),
	('double precision[]', $$'{1,2}'::float8[]$$),
	('double precision[]', $$'{-1,2}'::float8[]$$),
	('double precision[]', $$'{2.5,2}'::float8[]$$),
	('double precision[]', $$'{1,NaN}'::float8[]$$),
	('double precision[]', $$'{NaN,1}'::float8[]$$),
	('double precision[]', $$'{Infinity,1,2}'::float8[]$$),
	('double precision[]', $$'{1,1e308,-1e308}'::float8[]$$),
	('double precision[]', $$'{{1,2},{3,4}}'::float8[]$$),
	('double precision[]', $$'{1,NULL}'::float8[]$$),
	('double precision[]', $$'[5:6]={1,2}'::float8[]$$),
	('double precision[]', $$ARRAY[1::float8] || array_fill(0::float8, ARRAY[65535])$$),
	('double precision[]', $$ARRAY[1::float8] || array_fill(0::float8, ARRAY[16001])$$),
	('double precision[]', $$ARRAY[3::float8] || array_fill(1::float8, ARRAY[8])$$),
	('double precision[]', $$NULL::float8[]$$),
	('integer', '-2147483648'), ('integer', '-1'), ('integer', '0'), ('integer', '1'),
	('integer', '2'), ('integer', '8'), ('integer', '1000'), ('integer', '1001'),
	('integer', '16000'), ('integer', '16001'), ('integer', '2147483647'), ('integer', 'NULL::int'),
	('boolean', 'true'), ('boolean', 'false'),
	('regclass', $$'fuzz_idx'::regclass$$),
	('regclass', $$'fuzz_cos_idx'::regclass$$),
	('regclass', $$'fuzz_items'::regclass$$),
	('regclass', $$'fuzz_btree'::regclass$$),
	('regclass', $$'fuzz_part_idx'::regclass$$),
	('regclass', $$'fuzz_part_1_v_idx'::regclass$$),
	('regclass', $$'pg_class'::regclass$$),
	('regclass', $$0::regclass$$),
	('regclass', $$4294967295::oid::regclass$$),
	('vector[]', $$ARRAY['[1,2,3,4,5,6,7,8]'::vector]$$),
	('vector[]', $$ARRAY['[1,2,3]'::vector]$$),
	('vector[]', $$ARRAY['[0,0,0,0,0,0,0,0]'::vector, '[1,1,1,1,1,1,1,1]']$$),
	('vector[]', $$ARRAY[NULL::vector, '[1,2,3,4,5,6,7,8]']$$),
	('vector[]', $$'{}'::vector[]$$),
	('vector[]', $$ARRAY[ARRAY['[1,2,3,4,5,6,7,8]'::vector], ARRAY['[1,2,3,4,5,6,7,8]'::vector]]$$),
	('vector[]', $$ARRAY[array_fill(3e38::real, ARRAY[8])::vector]$$),
	('vector[]', $$(SELECT array_agg(v) FROM fuzz_items)$$),
	('vector[]', $$NULL::vector[]$$),
	('real[]', $$'{}'::real[]$$), ('real[]', $$'{NaN}'::real[]$$), ('real[]', $$'{1,2,3}'::real[]$$),
	('integer[]', $$'{1,NULL}'::int[]$$), ('integer[]', $$'{{1},{2}}'::int[]$$), ('integer[]', $$'{7}'::int[]$$),
	('numeric[]', $$'{1e39}'::numeric[]$$), ('numeric[]', $$'{NaN}'::numeric[]$$), ('numeric[]', $$'{0.1,2}'::numeric[]$$);

CREATE TABLE fuzz_items (id int, v vector(8));
INSERT INTO fuzz_items SELECT i, ARRAY[sin(i), cos(i), i % 3, i % 5, sin(i * 0.3), 1, 0, i % 2]::real[]::vector
	FROM generate_series(1, 300) i;
CREATE INDEX fuzz_idx ON fuzz_items USING tsdg (v vector_l2_ops);
CREATE INDEX fuzz_cos_idx ON fuzz_items USING tsdg (v vector_cosine_ops);
CREATE INDEX fuzz_btree ON fuzz_items (id);
CREATE TABLE fuzz_part (id int, v vector(8)) PARTITION BY RANGE (id);
CREATE TABLE fuzz_part_1 PARTITION OF fuzz_part FOR VALUES FROM (0) TO (1000);
INSERT INTO fuzz_part SELECT * FROM fuzz_items;
CREATE INDEX fuzz_part_idx ON fuzz_part USING tsdg (v vector_l2_ops);

CREATE TABLE fuzz_results (call text, sqlstate text, message text, round_trip bool);

-- Runs one statement: its outcome, and for a vector result whether its text
-- reads back as the same vector.
CREATE FUNCTION fuzz_run(call text, returns_vector bool) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	result text;
	same bool;
	state text;
	msg text;
BEGIN
	BEGIN
		IF call ~* '^select' THEN
			EXECUTE call INTO result;
		ELSE
			EXECUTE call;
		END IF;
		IF returns_vector AND result IS NOT NULL THEN
			EXECUTE 'SELECT $1::vector::text = $1 AND vector_dims($1::vector) BETWEEN 1 AND 16000'
				INTO same USING result;
		END IF;
		INSERT INTO fuzz_results VALUES (call, '00000', NULL, same);
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
		INSERT INTO fuzz_results VALUES (call, state, msg, NULL);
	END;
END
$$;

-- a random value of each argument type, 12 calls per function
DO $$
DECLARE
	f record;
	args text[];
	call text;
BEGIN
	FOR f IN
		SELECT p.proname, p.proargtypes::regtype[] AS types, p.prorettype, p.proretset
		FROM pg_proc p
		JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
		JOIN pg_extension e ON e.oid = d.refobjid AND e.extname IN ('pg_tsdg', 'vector')
		WHERE p.prokind = 'f' AND p.prorettype NOT IN ('internal'::regtype, 'index_am_handler'::regtype)
			AND NOT ('internal'::regtype = ANY (p.proargtypes::regtype[]))
			AND NOT ('cstring'::regtype = ANY (p.proargtypes::regtype[]))
		ORDER BY p.proname, p.proargtypes::text
	LOOP
		FOR i IN 1..12 LOOP
			SELECT array_agg((SELECT val FROM fuzz_values v WHERE v.typ = t ORDER BY random() + n * 0 LIMIT 1) ORDER BY n)
				INTO args FROM unnest(f.types) WITH ORDINALITY u(t, n);
			call := format('%I(%s)', f.proname, array_to_string(args, ', ', 'NULL'));
			IF f.proretset THEN
				call := 'SELECT count(*)::text FROM ' || call;
			ELSE
				call := 'SELECT (' || call || ')::text';
			END IF;
			PERFORM fuzz_run(call, f.prorettype = 'vector'::regtype);
		END LOOP;
	END LOOP;
END
$$;

-- every operator on every pair of vectors
DO $$
DECLARE
	o record;
	a record;
	b record;
BEGIN
	FOR o IN
		SELECT DISTINCT op.oprname, op.oprresult
		FROM pg_operator op
		JOIN pg_depend d ON d.classid = 'pg_operator'::regclass AND d.objid = op.oid AND d.deptype = 'e'
		JOIN pg_extension e ON e.oid = d.refobjid AND e.extname IN ('pg_tsdg', 'vector')
		ORDER BY 1
	LOOP
		FOR a IN SELECT val FROM fuzz_values WHERE typ = 'vector'::regtype ORDER BY val LOOP
			FOR b IN SELECT val FROM fuzz_values WHERE typ = 'vector'::regtype ORDER BY val LOOP
				PERFORM fuzz_run(format('SELECT (%s %s %s)::text', a.val, o.oprname, b.val),
								 o.oprresult = 'vector'::regtype);
			END LOOP;
		END LOOP;
	END LOOP;
END
$$;

-- random text as vector input, and the aggregates over random rows
DO $$
DECLARE
	chars text := '[],.-+e0123456789 naifNI';
	literal text;
BEGIN
	FOR i IN 1..300 LOOP
		SELECT string_agg(substr(chars, 1 + floor(random() * length(chars))::int, 1), '')
			INTO literal FROM generate_series(1, 1 + floor(random() * 12)::int);
		IF random() < 0.5 THEN
			literal := '[' || literal || ']';
		END IF;
		PERFORM fuzz_run(format('SELECT %L::vector::text', literal), true);
		PERFORM fuzz_run(format('SELECT %L::vector(2)::text', literal), true);
	END LOOP;
	FOR i IN 1..20 LOOP
		PERFORM fuzz_run(format('SELECT avg(v)::text FROM (SELECT %s AS v FROM generate_series(1, 3)) s',
						 (SELECT val FROM fuzz_values WHERE typ = 'vector'::regtype ORDER BY random() LIMIT 1)), true);
		PERFORM fuzz_run(format('SELECT sum(v)::text FROM (SELECT %s AS v UNION ALL SELECT %s) s',
						 (SELECT val FROM fuzz_values WHERE typ = 'vector'::regtype ORDER BY random() LIMIT 1),
						 (SELECT val FROM fuzz_values WHERE typ = 'vector'::regtype ORDER BY random() LIMIT 1)), true);
	END LOOP;
END
$$;

-- index options and settings out of range or of the wrong type
DO $$
DECLARE
	opt text;
	val text;
BEGIN
	FOREACH opt IN ARRAY ARRAY['degree', 'build_k', 'samples', 'iterations', 'alpha', 'lambda0', 'nosuch'] LOOP
		FOREACH val IN ARRAY ARRAY['-1', '0', '3', '129', '254', '255', '256', '2147483648', '1.5', 'NaN',
								   'Infinity', '''x''', ''''''] LOOP
			PERFORM fuzz_run(format('CREATE INDEX ON fuzz_items USING tsdg (v vector_l2_ops) WITH (%s = %s)', opt, val), false);
		END LOOP;
	END LOOP;
	FOREACH opt IN ARRAY ARRAY['tsdg.ef_search', 'tsdg.lambda_search', 'tsdg.max_scan_tuples',
							   'tsdg.merge_threshold', 'tsdg.merge_scale_factor', 'tsdg.device'] LOOP
		FOREACH val IN ARRAY ARRAY['-1', '0', '255', '256', '10001', '2147483648', 'NaN', 'x', ''''''] LOOP
			PERFORM fuzz_run(format('SET LOCAL %s = %s', opt, val), false);
		END LOOP;
	END LOOP;
END
$$;

-- the outcome: how many calls ran, and none that crashed, failed with an
-- internal error or returned a vector that does not read back
SELECT count(*) >= 1000 AS enough_calls, count(DISTINCT sqlstate) > 5 AS varied FROM fuzz_results;
SELECT call, sqlstate, message FROM fuzz_results
	WHERE sqlstate LIKE 'XX%' OR sqlstate LIKE '58%' ORDER BY call;
SELECT call FROM fuzz_results WHERE round_trip = false ORDER BY call;

DROP TABLE fuzz_results, fuzz_values, fuzz_items, fuzz_part;
DROP FUNCTION fuzz_run(text, bool);
