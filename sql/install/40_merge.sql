-- Merging the pending rows of a tsdg index into its graph (GGM), also done by
-- VACUUM past tsdg.merge_threshold + tsdg.merge_scale_factor * live rows.
-- Drops the deleted rows from the graph as well. Returns how many pending rows
-- were merged. Needs the table's owner; holds SHARE UPDATE EXCLUSIVE on the
-- table (as VACUUM does), so searches and inserts go on meanwhile.
CREATE FUNCTION tsdg_merge(index regclass) RETURNS bigint
	AS 'MODULE_PATHNAME' LANGUAGE C STRICT VOLATILE;
