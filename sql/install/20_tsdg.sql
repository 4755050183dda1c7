-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pg_tsdg CASCADE" to load this file. \quit

-- The tsdg index access method and its operator classes, for the vector type
-- of the extension "vector" (pgvector's, or pg_tsdg's own): the operators are
-- that extension's, the index reads the values itself, since both lay them
-- out alike.

CREATE FUNCTION tsdghandler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD tsdg TYPE INDEX HANDLER tsdghandler;

COMMENT ON ACCESS METHOD tsdg IS 'two-stage diversified graph index for nearest-neighbor search';

-- Support function 1 of each operator class names the metric the index is
-- built and searched with.
CREATE FUNCTION tsdg_metric_l2() RETURNS int4
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION tsdg_metric_inner_product() RETURNS int4
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION tsdg_metric_cosine() RETURNS int4
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION tsdg_metric_l1() RETURNS int4
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR CLASS vector_l2_ops
	FOR TYPE vector USING tsdg AS
	OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 tsdg_metric_l2();

CREATE OPERATOR CLASS vector_ip_ops
	FOR TYPE vector USING tsdg AS
	OPERATOR 1 <#> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 tsdg_metric_inner_product();

CREATE OPERATOR CLASS vector_cosine_ops
	FOR TYPE vector USING tsdg AS
	OPERATOR 1 <=> (vector, vector) FOR ORDER BY float_ops,
	FUNCTION 1 tsdg_metric_cosine();

-- pgvector has had the L1 operator <+> since its version 0.7.0: beside an
-- older pgvector the L1 class has no operator to order by, and the rest
-- installs without it.
DO $$
BEGIN
	IF to_regoperator('<+>(vector,vector)') IS NOT NULL THEN
		CREATE OPERATOR CLASS vector_l1_ops
			FOR TYPE vector USING tsdg AS
			OPERATOR 1 <+> (vector, vector) FOR ORDER BY float_ops,
			FUNCTION 1 tsdg_metric_l1();
	END IF;
END
$$;

CREATE FUNCTION tsdg_index_info(index regclass,
	OUT rows bigint, OUT pending bigint, OUT deleted bigint, OUT degree int,
	OUT size bigint, OUT graph_version bigint, OUT dims int, OUT metric text,
	OUT build_k int, OUT samples int, OUT iterations int, OUT alpha real,
	OUT lambda0 int, OUT entry_points int, OUT last_merge timestamptz, OUT merges bigint,
	OUT knn_lag bigint, OUT unreached bigint, OUT profile_nodes bigint, OUT profile_scored real[],
	OUT layer_nodes bigint, OUT profile_layer_scored real[])
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT;
