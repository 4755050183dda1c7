/*
 * tsdg_search_batch(index regclass, queries vector[], k int)
 *   RETURNS TABLE(query int, tid tid, distance real)
 *
 * Many searches in one call: on the GPU worker as one large batch when it
 * runs, else on the CPU backend's batch search over the index read into
 * memory. The pending rows are searched exactly and merged, as an index scan
 * does, so a row is found whether or not it was merged into the graph yet.
 * query is the ordinal of the query in the array (from 1); tid is the heap
 * row, to join with the table on ctid.
 */
#include "postgres.h"

#include <math.h>

#include "access/relation.h"
#include "catalog/index.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgworker.h"

#define TSDG_BATCH_MAX_K	1000
/* batches this large get a LOG line saying where their time went */
#define TSDG_BATCH_LOGGED	1000

PG_FUNCTION_INFO_V1(tsdg_search_batch);

/* the queries of the array as one matrix; NULL and zero (cosine) queries have no row */
typedef struct TsdgBatchQueries
{
	int			count;			/* elements of the array */
	int			searchable;		/* rows of matrix */
	int		   *ordinal;		/* per matrix row: its position in the array, from 1 */
	float	   *matrix;
} TsdgBatchQueries;

/* the elements of the array; their count sizes the matrix */
static void
TsdgDeconstructQueries(ArrayType *array, Datum **elems, bool **nulls, int *count)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("tsdg_search_batch takes a one-dimensional array of queries")));
	get_typlenbyvalalign(ARR_ELEMTYPE(array), &typlen, &typbyval, &typalign);
	deconstruct_array(array, ARR_ELEMTYPE(array), typlen, typbyval, typalign,
					  elems, nulls, count);
}

/* Fills queries->matrix (room for every element) with the searchable queries. */
static void
TsdgCollectQueries(const Datum *elems, const bool *nulls, TsdgMetric metric, int dims,
				   TsdgBatchQueries *queries)
{
	queries->searchable = 0;
	queries->ordinal = palloc(sizeof(int) * Max(queries->count, 1));
	for (int i = 0; i < queries->count; i++)
	{
		int			vec_dims;

		if (nulls[i])
			continue;
		if (TsdgCopyVector(elems[i], metric, dims,
						   queries->matrix + (Size) queries->searchable * dims, &vec_dims))
			queries->ordinal[queries->searchable++] = i + 1;
		else if (vec_dims != dims)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("different vector dimensions %d and %d", dims, vec_dims),
					 errdetail("Query %d of the batch does not match the index.", i + 1)));
	}
}

/*
 * The function's tuplestore, allowed as much memory as the results it will
 * hold: they are in memory already, and a tuplestore that spilled them to a
 * temporary file at work_mem would write and read them back for nothing.
 */
static void
TsdgSizeTuplestore(ReturnSetInfo *rsinfo, Size rows)
{
	MemoryContext old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	/* a minimal tuple of (int4, tid, float4), its chunk header and its slot in the array */
	Size		kb = rows * 64 / 1024 + 1;

	tuplestore_end(rsinfo->setResult);
	rsinfo->setResult = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
											  false, (int) Min(Max(kb, (Size) work_mem), (Size) MAX_KILOBYTES));
	MemoryContextSwitchTo(old);
}

static void
TsdgCheckCoreStatus(TsdgStatus status, const TsdgError *error)
{
	if (status != TSDG_OK)
		ereport(ERROR,
				(errcode(status == TSDG_ERR_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
				 errmsg("tsdg batch search failed: %s", error->message)));
}

/*
 * The CPU path: the graph read into memory and searched by the core's CPU
 * backend, k results per query after deleted nodes are left out.
 */
static void
TsdgCpuSearchBatch(Relation index, const TsdgMetaPageData *meta, const TsdgBatchQueries *queries,
				   int k, int ef, ItemPointerData *tids, float *dists)
{
	TsdgIndexImage image;
	TsdgResidentIndex *resident;
	TsdgError	error;
	int			wide_k = k + (meta->deleted_count > 0 ? Min(k, (int) meta->deleted_count) : 0);
	int64		n = meta->node_count;
	uint32	   *ids;
	float	   *wide_dists;
	TsdgStatus	status;

	image.n = n;
	image.dims = meta->dims;
	image.degree = meta->degree;
	image.rows = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * meta->dims * n);
	image.neighbors = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * meta->degree * n);
	image.lambdas = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint8) * meta->degree * n);
	image.tids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(ItemPointerData) * n);
	image.flags = MemoryContextAllocHuge(CurrentMemoryContext, n);
	TsdgReadIndexImage(index, meta, &image);

	ids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * wide_k * queries->searchable);
	wide_dists = MemoryContextAllocHuge(CurrentMemoryContext,
										sizeof(float) * wide_k * queries->searchable);
	resident = tsdg_index_upload(NULL, image.rows, n, meta->dims, (TsdgMetric) meta->metric,
								 image.neighbors, image.lambdas, meta->degree, &error);
	if (resident == NULL)
		TsdgCheckCoreStatus(TSDG_ERR_OUT_OF_MEMORY, &error);
	status = tsdg_index_search(resident, queries->matrix, queries->searchable, wide_k,
							   Max(ef, wide_k), tsdg_lambda_search, ids, wide_dists, &error);
	tsdg_index_free(resident);
	TsdgCheckCoreStatus(status, &error);

	TsdgNodeResultsToTids(ids, wide_dists, queries->searchable, wide_k, k, n, image.tids,
						  image.flags, tids, dists);
}

/* Merges the exact k nearest pending rows into each query's k graph results. */
static void
TsdgMergePending(Relation index, const TsdgMetaPageData *meta, const TsdgBatchQueries *queries,
				 int k, ItemPointerData *tids, float *dists)
{
	TsdgLayout	layout;
	TsdgPendingRows pending;
	uint32	   *ids;
	float	   *pdists;
	ItemPointerData *merged_tids;
	float	   *merged_dists;
	TsdgError	error;

	TsdgLayoutFromMeta(&layout, meta);
	TsdgInitPendingRows(&pending, layout.dims, meta->pending_count);
	TsdgReadPendingRows(index, &layout, meta->pending_head, InvalidBlockNumber, &pending);
	if (pending.count == 0)
		return;
	ids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * k * queries->searchable);
	pdists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * k * queries->searchable);
	TsdgCheckCoreStatus(tsdg_exact_knn(NULL, pending.rows, pending.count, queries->matrix,
									   queries->searchable, meta->dims,
									   (TsdgMetric) meta->metric, k, ids, pdists, &error),
						&error);

	merged_tids = palloc(sizeof(ItemPointerData) * k);
	merged_dists = palloc(sizeof(float) * k);
	for (int q = 0; q < queries->searchable; q++)
	{
		ItemPointerData *gt = tids + (Size) q * k;
		float	   *gd = dists + (Size) q * k;
		uint32	   *pi = ids + (Size) q * k;
		float	   *pd = pdists + (Size) q * k;
		int			g = 0,
					p = 0;

		for (int out = 0; out < k; out++)
		{
			bool		take_pending = p < k && pi[p] != TSDG_INVALID_ID &&
				(g >= k || !ItemPointerIsValid(&gt[g]) || pd[p] < gd[g]);

			if (take_pending)
			{
				merged_tids[out] = pending.tids[pi[p]];
				merged_dists[out] = pd[p++];
			}
			else if (g < k)
			{
				merged_tids[out] = gt[g];
				merged_dists[out] = gd[g++];
			}
		}
		memcpy(gt, merged_tids, sizeof(ItemPointerData) * k);
		memcpy(gd, merged_dists, sizeof(float) * k);
	}
}

Datum
tsdg_search_batch(PG_FUNCTION_ARGS)
{
	Oid			index_oid = PG_GETARG_OID(0);
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(1);
	int			k = PG_GETARG_INT32(2);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			heap_oid;
	Relation	index;
	TsdgMetaPageData meta;
	TsdgBatchQueries queries;
	TsdgBatchArea area;
	Datum	   *elems;
	bool	   *nulls;
	ItemPointerData *tids;
	float	   *dists;
	int			ef;
	bool		worker_area;
	bool		on_worker = false;
	TimestampTz start,
				collected_at,
				graph_at,
				pending_at;

	if (k < 1 || k > TSDG_BATCH_MAX_K)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be between 1 and %d", TSDG_BATCH_MAX_K)));
	InitMaterializedSRF(fcinfo, 0);

	heap_oid = IndexGetRelation(index_oid, true);
	if (!OidIsValid(heap_oid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index",
						get_rel_name(index_oid) ? get_rel_name(index_oid) : "?")));
	if (pg_class_aclcheck(heap_oid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(heap_oid));
	LockRelationOid(heap_oid, AccessShareLock);
	index = index_open(index_oid, AccessShareLock);
	if (index->rd_indam->ambuild != tsdgbuild)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a tsdg index", RelationGetRelationName(index))));

	TsdgReadMeta(index, &meta);
	if (meta.dims == 0)
	{
		/* an index built on an empty table: no row to find */
		index_close(index, AccessShareLock);
		return (Datum) 0;
	}
	start = GetCurrentTimestamp();
	TsdgDeconstructQueries(array, &elems, &nulls, &queries.count);
	/* the queries go where the worker reads them, and its results stay where it writes them */
	worker_area = meta.node_count > 0 && queries.count > 0 &&
		TsdgWorkerBatchArea(queries.count, meta.dims, k, &area);
	if (worker_area)
		queries.matrix = area.queries;
	else
		queries.matrix = MemoryContextAllocHuge(CurrentMemoryContext,
												sizeof(float) * meta.dims * Max(queries.count, 1));
	TsdgCollectQueries(elems, nulls, (TsdgMetric) meta.metric, meta.dims, &queries);
	collected_at = GetCurrentTimestamp();
	if (queries.searchable == 0)
	{
		index_close(index, AccessShareLock);
		return (Datum) 0;
	}

	ef = Max(tsdg_ef_search, k);
	if (worker_area)
	{
		tids = area.tids;
		dists = area.dists;
	}
	else
	{
		tids = MemoryContextAllocHuge(CurrentMemoryContext,
									  sizeof(ItemPointerData) * k * queries.searchable);
		dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * k * queries.searchable);
	}
	if (meta.node_count == 0)
	{
		for (Size i = 0; i < (Size) k * queries.searchable; i++)
		{
			ItemPointerSetInvalid(&tids[i]);
			dists[i] = INFINITY;
		}
	}
	else if (worker_area && TsdgWorkerSearchBatch(index, &meta, queries.searchable, k, ef,
												  tsdg_lambda_search))
		on_worker = true;
	else
		TsdgCpuSearchBatch(index, &meta, &queries, k, ef, tids, dists);
	graph_at = GetCurrentTimestamp();
	TsdgMergePending(index, &meta, &queries, k, tids, dists);
	pending_at = GetCurrentTimestamp();

	TsdgSizeTuplestore(rsinfo, (Size) k * queries.searchable);
	for (int q = 0; q < queries.searchable; q++)
	{
		Datum		values[3];
		bool		row_nulls[3] = {false, false, false};

		values[0] = Int32GetDatum(queries.ordinal[q]);
		for (int j = 0; j < k; j++)
		{
			ItemPointer tid = &tids[(Size) q * k + j];
			float		d = dists[(Size) q * k + j];

			if (!ItemPointerIsValid(tid))
				break;
			values[1] = PointerGetDatum(tid);
			values[2] = Float4GetDatum(meta.metric == TSDG_METRIC_L2 ? sqrtf(Max(d, 0.0f)) : d);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, row_nulls);
		}
	}
	if (worker_area)
		TsdgWorkerBatchAreaDone();
	if (queries.searchable >= TSDG_BATCH_LOGGED)
		ereport(LOG,
				(errmsg("tsdg_search_batch: %d queries on %s: %.3f ms reading the queries, %.3f ms searching, %.3f ms pending rows, %.3f ms returning rows",
						queries.searchable, on_worker ? "the GPU worker" : "the CPU",
						(double) (collected_at - start) / 1000.0,
						(double) (graph_at - collected_at) / 1000.0,
						(double) (pending_at - graph_at) / 1000.0,
						(double) (GetCurrentTimestamp() - pending_at) / 1000.0)));
	index_close(index, AccessShareLock);
	return (Datum) 0;
}
