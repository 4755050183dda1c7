/*
 * tsdg_index_info(regclass): what a tsdg index holds and how it was built,
 * read from its metapage (its navigating layer's nodes among them), with the
 * search profile the planner prices its searches by (tsdgprofile.c).
 */
#include "postgres.h"

#include "access/genam.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgindexarg.h"

/* what the metapage says of the rows is the table's: the right to read it */
static void
TsdgCheckReadRight(Oid index_oid, Oid heap_oid, void *arg)
{
	if (pg_class_aclcheck(heap_oid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(heap_oid));
}

PG_FUNCTION_INFO_V1(tsdg_index_info);
Datum
tsdg_index_info(PG_FUNCTION_ARGS)
{
	const TsdgIndexArg arg = {
		.check = TsdgCheckReadRight,
		.heap_lock = NoLock,
		.index_lock = AccessShareLock,
		.partition_hint = "Ask about the index of each partition.",
	};
	Relation	index;
	TsdgMetaPageData meta;
	TupleDesc	tupdesc;
	Datum		values[22];
	bool		nulls[22] = {0};
	Datum		scored[TSDG_PROFILE_STEPS];
	Datum		layer_scored[TSDG_PROFILE_STEPS];
	int64		size;
	Oid			heapid;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	index = TsdgOpenIndexArg(PG_GETARG_OID(0), &arg, &heapid);
	TsdgReadMeta(index, &meta);
	size = (int64) RelationGetNumberOfBlocks(index) * BLCKSZ;
	index_close(index, AccessShareLock);

	values[0] = Int64GetDatum(meta.node_count - meta.deleted_count);
	values[1] = Int64GetDatum(meta.pending_count);
	values[2] = Int64GetDatum(meta.deleted_count);
	values[3] = Int32GetDatum(meta.degree);
	values[4] = Int64GetDatum(size);
	values[5] = Int64GetDatum((int64) meta.graph_version);
	values[6] = Int32GetDatum(meta.dims);
	values[7] = CStringGetTextDatum(TsdgMetricName(meta.metric));
	values[8] = Int32GetDatum(meta.build_k);
	values[9] = Int32GetDatum(meta.samples);
	values[10] = Int32GetDatum(meta.iterations);
	values[11] = Float4GetDatum(meta.alpha);
	values[12] = Int32GetDatum(meta.lambda0);
	values[13] = Int32GetDatum(meta.entry_count);
	values[14] = TimestampTzGetDatum(meta.last_merge);
	nulls[14] = meta.merge_count == 0;
	values[15] = Int64GetDatum((int64) meta.merge_count);
	values[16] = Int64GetDatum((int64) Min(meta.knn_unstored, meta.node_count));
	values[17] = Int64GetDatum((int64) meta.unreached_count);
	values[18] = Int64GetDatum((int64) meta.profile_nodes);
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
		scored[step] = Float4GetDatum(meta.profile_scored[step]);
	values[19] = PointerGetDatum(construct_array(scored, TSDG_PROFILE_STEPS, FLOAT4OID, sizeof(float4),
												 true, TYPALIGN_INT));
	nulls[19] = meta.profile_nodes == 0;
	values[20] = Int64GetDatum((int64) meta.layer_nodes);
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
		layer_scored[step] = Float4GetDatum(meta.profile_layer_scored[step]);
	values[21] = PointerGetDatum(construct_array(layer_scored, TSDG_PROFILE_STEPS, FLOAT4OID,
												 sizeof(float4), true, TYPALIGN_INT));
	/* a profile measured from the navigating set has no layer's walks */
	nulls[21] = meta.profile_nodes == 0 || meta.profile_layer_scored[0] == 0;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
