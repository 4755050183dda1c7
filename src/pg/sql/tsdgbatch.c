/*
 * tsdg_search_batch(index regclass, queries vector[], k int)
 *   RETURNS TABLE(query int, tid tid, distance real)
 * tsdg_search_batch_arrays(index regclass, queries vector[], k int)
 *   RETURNS TABLE(query int, tids tid[], distances real[])
 *
 * Many searches in one call: on the GPU worker as one large batch when it
 * runs, else on the CPU backend's batch search over the index read into
 * memory. The pending rows are searched exactly and merged, as an index scan
 * does, so a row is found whether or not it was merged into the graph yet:
 * by the worker, on its copy of them, when it holds them all
 * (tsdg.worker_pending_rows), else here.
 * query is the ordinal of the query in the array (from 1); tid is the heap
 * row, to join with the table on ctid. The first form returns a row per
 * neighbor, the second a row per query with its neighbors nearest first
 * (the k x nq matrix of FAISS and cuVS), which is an order of magnitude fewer
 * rows for the executor to carry.
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgindexarg.h"
#include "tsdgqueryarray.h"
#include "tsdgworkerclient.h"

#define TSDG_BATCH_MAX_K	1000
/* batches this large get a LOG line saying where their time went */
#define TSDG_BATCH_LOGGED	1000

PG_FUNCTION_INFO_V1(tsdg_search_batch);
PG_FUNCTION_INFO_V1(tsdg_search_batch_arrays);

/*
 * Queries the CPU path searches between checks for cancellation (the core's
 * search returns only when the whole batch is done): this much work, queries
 * times ef, and at least as many queries as the core searches on all its
 * threads.
 */
#define TSDG_CPU_BATCH_CHUNK_WORK	(1024 * 100)
#define TSDG_CPU_BATCH_CHUNK_MIN	32
#define TSDG_CPU_BATCH_CHUNK_MAX	1024
/* the most memory the CPU path's widened results may take, ids and distances */
#define TSDG_CPU_WIDE_RESULT_BYTES	((Size) 256 * 1024 * 1024)

static void
TsdgCheckCoreStatus(TsdgStatus status, const TsdgError *error)
{
	if (status != TSDG_OK)
		ereport(ERROR,
				(errcode(status == TSDG_ERR_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
				 errmsg("tsdg batch search failed: %s", error->message)));
}

/*
 * The exact nearest of the nodes the last merge found the searches do not
 * reach (tsdg.h) merged into each query's wide_k graph results, a node once.
 */
static void
TsdgMergeUnreached(const TsdgMetaPageData *meta, const TsdgIndexImage *image,
				   const TsdgBatchQueries *queries, int wide_k, uint32 *ids, float *dists)
{
	int			count = meta->unreached_count;
	int			uk = Min(wide_k, count);
	int			dims = meta->dims;
	int			nq = queries->searchable;
	float	   *rows;
	uint32	   *positions;
	float	   *hit_dists;
	uint32	   *hit_ids;
	uint32	   *scratch_ids;
	float	   *scratch_dists;
	uint32		missing = TSDG_INVALID_ID;
	TsdgError	error;

	if (count == 0 || nq == 0)
		return;
	hit_ids = palloc(sizeof(uint32) * uk);
	scratch_ids = palloc(sizeof(uint32) * wide_k);
	scratch_dists = palloc(sizeof(float) * wide_k);
	rows = palloc(sizeof(float) * dims * count);
	for (int i = 0; i < count; i++)
	{
		if (meta->unreached[i] >= image->n)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("tsdg index metapage lists unreached node %u of %lld",
							meta->unreached[i], (long long) image->n)));
		memcpy(rows + (Size) i * dims, image->rows + (Size) meta->unreached[i] * dims,
			   sizeof(float) * dims);
	}
	positions = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * uk * (Size) nq);
	hit_dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * uk * (Size) nq);
	TsdgCheckCoreStatus(tsdg_exact_knn(NULL, rows, count, queries->matrix, nq, dims,
									   (TsdgMetric) meta->metric, uk, positions, hit_dists,
									   &error),
						&error);
	for (int q = 0; q < nq; q++)
	{
		const uint32 *qpos = positions + (Size) q * uk;

		for (int j = 0; j < uk; j++)
			hit_ids[j] = qpos[j] == TSDG_INVALID_ID ? TSDG_INVALID_ID : meta->unreached[qpos[j]];
		TsdgMergeExactHits(wide_k, ids + (Size) q * wide_k, dists + (Size) q * wide_k,
						   sizeof(uint32), &missing, hit_ids, hit_dists + (Size) q * uk, uk,
						   scratch_ids, scratch_dists);
	}
	pfree(rows);
	pfree(positions);
	pfree(hit_dists);
	pfree(hit_ids);
	pfree(scratch_ids);
	pfree(scratch_dists);
}

/* Searches every query for wide_k nodes, checking for cancellation between chunks. */
static void
TsdgSearchChunks(TsdgResidentIndex *resident, const TsdgBatchQueries *queries, int dims,
				 int wide_k, int ef, uint32 *ids, float *dists)
{
	TsdgError	error;
	int			chunk = Max(TSDG_CPU_BATCH_CHUNK_MIN,
							Min(TSDG_CPU_BATCH_CHUNK_MAX,
								TSDG_CPU_BATCH_CHUNK_WORK / Max(1, Max(ef, wide_k))));

	for (int first = 0; first < queries->searchable; first += chunk)
	{
		int			count = Min(chunk, queries->searchable - first);

		CHECK_FOR_INTERRUPTS();
		TsdgCheckCoreStatus(tsdg_index_search(resident, queries->matrix + (Size) first * dims,
											  count, wide_k, Max(ef, wide_k), tsdg_lambda_search,
											  ids + (Size) first * wide_k,
											  dists + (Size) first * wide_k, &error),
							&error);
	}
}

/* whether some query got fewer than k rows */
static bool
TsdgSomeQueryShort(const ItemPointerData *tids, int searchable, int k)
{
	for (int q = 0; q < searchable; q++)
		if (!ItemPointerIsValid(&tids[(Size) q * k + k - 1]))
			return true;
	return false;
}

/* The search for wide_k nodes per query, widened while a query comes short of k rows. */
static void
TsdgSearchWidening(TsdgResidentIndex *resident, const TsdgMetaPageData *meta,
				   const TsdgIndexImage *image, const TsdgBatchQueries *queries, int k, int ef,
				   int wide_k, int64 most_k, ItemPointerData *tids, float *dists)
{
	for (;;)
	{
		uint32	   *ids = MemoryContextAllocHuge(CurrentMemoryContext,
												 sizeof(uint32) * wide_k * queries->searchable);
		float	   *wide_dists = MemoryContextAllocHuge(CurrentMemoryContext,
														sizeof(float) * wide_k * queries->searchable);

		TsdgSearchChunks(resident, queries, meta->dims, wide_k, ef, ids, wide_dists);
		TsdgMergeUnreached(meta, image, queries, wide_k, ids, wide_dists);
		TsdgNodeResultsToTids(ids, wide_dists, queries->searchable, wide_k, k, meta->node_count,
							  image->tids, image->flags, tids, dists);
		pfree(ids);
		pfree(wide_dists);
		if (wide_k >= most_k || !TsdgSomeQueryShort(tids, queries->searchable, k))
			return;
		wide_k = (int) Min((int64) wide_k * 2, most_k);
	}
}

/*
 * The CPU path: the graph read into memory and searched by the core's CPU
 * backend, k results per query after deleted nodes are left out. Deleted
 * nodes near a query take places among its nearest: the search asks for
 * more until every query has k rows or no deleted node is left to skip.
 */
static void
TsdgCpuSearchBatch(Relation index, const TsdgMetaPageData *meta, const TsdgBatchQueries *queries,
				   int k, int ef, ItemPointerData *tids, float *dists)
{
	TsdgIndexImage image;
	TsdgResidentIndex *resident;
	TsdgError	error;
	int64		n = meta->node_count;
	/* past this a query cannot need more: every deleted node ranked ahead of its rows */
	int64		most_k = Min((int64) k + meta->deleted_count, Min(n, (int64) INT_MAX / 2));
	int64		affordable_k = (int64) (TSDG_CPU_WIDE_RESULT_BYTES /
										((sizeof(uint32) + sizeof(float)) * Max(queries->searchable, 1)));
	int			wide_k;

	most_k = Max(Min(most_k, affordable_k), k);
	wide_k = (int) Min((int64) k + Min(k, (int64) meta->deleted_count), most_k);

	image.n = n;
	image.dims = meta->dims;
	image.degree = meta->degree;
	image.rows = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * meta->dims * n);
	image.neighbors = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * meta->degree * n);
	image.lambdas = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint8) * meta->degree * n);
	image.tids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(ItemPointerData) * n);
	image.flags = MemoryContextAllocHuge(CurrentMemoryContext, n);
	image.layer_ids = palloc(sizeof(uint32) * meta->degree * ((Size) meta->layer_nodes + 1));
	image.layer_lambdas = palloc(sizeof(uint8) * meta->degree * ((Size) meta->layer_nodes + 1));
	TsdgReadIndexImage(index, meta, &image);

	resident = tsdg_index_upload(NULL, image.rows, n, meta->dims, (TsdgMetric) meta->metric,
								 image.neighbors, image.lambdas, meta->degree, &error);
	if (resident == NULL)
		TsdgCheckCoreStatus(TSDG_ERR_OUT_OF_MEMORY, &error);
	PG_TRY();
	{
		/* the searches start from the layer's walk, as the worker's do */
		if (meta->layer_nodes > 0)
			TsdgCheckCoreStatus(tsdg_index_set_layer(resident, image.layer_ids, image.layer_lambdas,
													 meta->layer_nodes, meta->degree, &error),
								&error);
		TsdgSearchWidening(resident, meta, &image, queries, k, ef, wide_k, most_k, tids, dists);
	}
	PG_FINALLY();
	{
		tsdg_index_free(resident);
	}
	PG_END_TRY();
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

/* one call's batch: its queries, where their results are, and where its time went */
typedef struct TsdgBatchCall
{
	Relation	index;
	TsdgMetaPageData meta;
	TsdgBatchQueries queries;
	int			k;
	/* k per searchable query, nearest first, an invalid tid after its last result */
	ItemPointerData *tids;
	float	   *dists;			/* squared for L2 */
	bool		worker_area;	/* the queries, tids and dists are where the worker reads and writes */
	bool		shared_area;	/* that is the batch area (else the session's own segment) */
	bool		on_worker;
	TimestampTz start,
				detoasted_at,
				collected_at,
				graph_at,
				pending_at;
} TsdgBatchCall;

/* the distance as the operators return it */
static inline float
TsdgBatchDistance(const TsdgBatchCall *call, float d)
{
	return call->meta.metric == TSDG_METRIC_L2 ? sqrtf(Max(d, 0.0f)) : d;
}

/*
 * Searches the queries of the array in the index open in call, its metapage
 * read into call->meta (see TsdgBatchSearch).
 */
static void
TsdgSearchQueries(FunctionCallInfo fcinfo, bool nulls_allowed, const char *function,
				  TsdgBatchCall *call)
{
	TsdgQueryArray array;
	TsdgBatchArea area;
	int			ef;
	bool		pending_searched = false;


	call->start = GetCurrentTimestamp();
	TsdgOpenQueryArray(PG_GETARG_DATUM(1), nulls_allowed, function, &array);
	call->detoasted_at = GetCurrentTimestamp();
	call->queries.count = array.count;
	call->queries.searchable = 0;
	call->queries.ordinal = NULL;
	call->worker_area = false;
	call->shared_area = false;
	call->on_worker = false;
	if (call->meta.dims == 0 || call->queries.count == 0)
	{
		/* an index built on an empty table, or no query: no row to find */
		call->collected_at = call->graph_at = call->pending_at = GetCurrentTimestamp();
		return;
	}

	/* the queries go where the worker reads them, and its results stay where it writes them */
	call->worker_area = call->meta.node_count > 0 &&
		TsdgWorkerBatchArea((TsdgMetric) call->meta.metric, call->queries.count, call->meta.dims, call->k,
							&area);
	if (call->worker_area)
	{
		call->queries.matrix = area.queries;
		call->shared_area = area.shared;
	}
	else
		call->queries.matrix = MemoryContextAllocHuge(CurrentMemoryContext,
													  sizeof(float) * call->meta.dims * call->queries.count);
	TsdgCollectQueries(&array, (TsdgMetric) call->meta.metric, call->meta.dims, &call->queries);
	call->collected_at = GetCurrentTimestamp();
	if (call->queries.searchable == 0)
	{
		call->graph_at = call->pending_at = call->collected_at;
		return;
	}

	ef = Max(tsdg_ef_search, call->k);
	if (call->worker_area)
	{
		call->tids = area.tids;
		call->dists = area.dists;
	}
	else
	{
		call->tids = MemoryContextAllocHuge(CurrentMemoryContext,
											sizeof(ItemPointerData) * call->k * call->queries.searchable);
		call->dists = MemoryContextAllocHuge(CurrentMemoryContext,
											 sizeof(float) * call->k * call->queries.searchable);
	}
	if (call->meta.node_count == 0)
	{
		for (Size i = 0; i < (Size) call->k * call->queries.searchable; i++)
		{
			ItemPointerSetInvalid(&call->tids[i]);
			call->dists[i] = INFINITY;
		}
	}
	else if (call->worker_area &&
			 TsdgWorkerSearchBatch(call->index, &call->meta, call->queries.searchable, call->k, ef,
								   tsdg_lambda_search, &pending_searched))
		call->on_worker = true;
	else
		TsdgCpuSearchBatch(call->index, &call->meta, &call->queries, call->k, ef,
						   call->tids, call->dists);
	call->graph_at = GetCurrentTimestamp();
	if (!pending_searched)
		TsdgMergePending(call->index, &call->meta, &call->queries, call->k, call->tids, call->dists);
	call->pending_at = GetCurrentTimestamp();
}

/*
 * The rows a batch returns are the table's: the caller must be allowed to
 * read the indexed column of every row, as a query using the index would.
 * The search cannot apply row-level security policies (it answers from the
 * graph, before any row is read), so a table whose policies apply to the
 * caller is refused rather than searched; an index scan applies them.
 * Checked before any lock is taken (TsdgOpenIndexArg).
 */
static void
TsdgCheckBatchAccess(Oid index_oid, Oid heap_oid, void *arg)
{
	const char *function = arg;
	Oid			user = GetUserId();
	HeapTuple	tuple;
	Form_pg_index index_form;

	if (pg_class_aclcheck(heap_oid, user, ACL_SELECT) != ACLCHECK_OK)
	{
		tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(index_oid));
		if (!HeapTupleIsValid(tuple))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("index with OID %u does not exist", index_oid)));
		index_form = (Form_pg_index) GETSTRUCT(tuple);
		for (int i = 0; i < index_form->indnatts; i++)
		{
			AttrNumber	attnum = index_form->indkey.values[i];

			/* an expression column reads the row: it takes SELECT on the table */
			if (attnum == 0 ||
				pg_attribute_aclcheck(heap_oid, attnum, user, ACL_SELECT) != ACLCHECK_OK)
			{
				ReleaseSysCache(tuple);
				aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(heap_oid));
			}
		}
		ReleaseSysCache(tuple);
	}
	if (check_enable_rls(heap_oid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s cannot search table \"%s\": row-level security applies to it",
						function, get_rel_name(heap_oid)),
				 errhint("Search with ORDER BY ... LIMIT, which applies the table's policies.")));
}

/*
 * Opens the index and searches the queries of the array. NULL elements are
 * skipped (no row), or an error where the caller returns a row per query.
 * call->queries.searchable is 0 where nothing was searched (an empty array,
 * an index on an empty table); the index stays open for TsdgBatchFinish.
 */
static void
TsdgBatchSearch(FunctionCallInfo fcinfo, bool nulls_allowed, const char *function,
				TsdgBatchCall *call)
{
	const TsdgIndexArg arg = {
		.check = TsdgCheckBatchAccess,
		.check_arg = unconstify(char *, function),
		.heap_lock = AccessShareLock,
		.index_lock = AccessShareLock,
		.partition_hint = "Search the index of each partition.",
	};
	Oid			heap_oid;
	Buffer		meta_pin;

	call->k = PG_GETARG_INT32(2);
	if (call->k < 1 || call->k > TSDG_BATCH_MAX_K)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be between 1 and %d", TSDG_BATCH_MAX_K)));

	call->index = TsdgOpenIndexArg(PG_GETARG_OID(0), &arg, &heap_oid);

	/*
	 * The metapage stays pinned while the pages are read, as by an index
	 * scan: a merge reuses the pages of the graph read here only once no
	 * such pin is left (tsdgmergeswitch.c).
	 */
	meta_pin = ReadBuffer(call->index, TSDG_METAPAGE_BLKNO);
	TsdgReadMeta(call->index, &call->meta);
	TsdgSearchQueries(fcinfo, nulls_allowed, function, call);
	ReleaseBuffer(meta_pin);
}

/* After the results are returned: the segment kept or given up, the LOG line, the index closed. */
static void
TsdgBatchFinish(TsdgBatchCall *call, const char *function)
{
	if (call->worker_area)
		TsdgWorkerBatchAreaDone();
	if (call->queries.searchable >= TSDG_BATCH_LOGGED)
		ereport(LOG,
				(errmsg("%s: %d queries on %s: %.3f ms detoasting the array, %.3f ms reading the queries, %.3f ms searching, %.3f ms pending rows, %.3f ms returning rows",
						function, call->queries.searchable,
						!call->on_worker ? "the CPU" :
						call->shared_area ? "the GPU worker (batch area)" : "the GPU worker (own segment)",
						(double) (call->detoasted_at - call->start) / 1000.0,
						(double) (call->collected_at - call->detoasted_at) / 1000.0,
						(double) (call->graph_at - call->collected_at) / 1000.0,
						(double) (call->pending_at - call->graph_at) / 1000.0,
						(double) (GetCurrentTimestamp() - call->pending_at) / 1000.0),
				 call->on_worker ?
				 errdetail("The round trip to the worker: %.3f ms until it took the batch, %.3f ms on the worker, %.3f ms until the session woke.",
						   (double) TsdgLastBatchRoundTrip.to_worker_us / 1000.0,
						   (double) TsdgLastBatchRoundTrip.on_worker_us / 1000.0,
						   (double) TsdgLastBatchRoundTrip.back_us / 1000.0) : 0));
	index_close(call->index, AccessShareLock);
}

Datum
tsdg_search_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TsdgBatchCall call;

	InitMaterializedSRF(fcinfo, 0);
	TsdgBatchSearch(fcinfo, true, "tsdg_search_batch", &call);

	for (int q = 0; q < call.queries.searchable; q++)
	{
		Datum		values[3];
		bool		row_nulls[3] = {false, false, false};

		values[0] = Int32GetDatum(call.queries.ordinal[q]);
		for (int j = 0; j < call.k; j++)
		{
			ItemPointer tid = &call.tids[(Size) q * call.k + j];

			if (!ItemPointerIsValid(tid))
				break;
			values[1] = PointerGetDatum(tid);
			values[2] = Float4GetDatum(TsdgBatchDistance(&call, call.dists[(Size) q * call.k + j]));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, row_nulls);
		}
	}
	TsdgBatchFinish(&call, "tsdg_search_batch");
	return (Datum) 0;
}

/* where the elements of a one-dimensional array without NULLs start */
static inline char *
TsdgArrayData(ArrayType *array)
{
	return (char *) array + ARR_OVERHEAD_NONULLS(1);
}

/*
 * Sets the header of a one-dimensional array of count elements whose data
 * the caller wrote at TsdgArrayData: no Datum per element, no NULL bitmap.
 * An empty array has no dimension, as PostgreSQL's own empty arrays.
 */
static Datum
TsdgSetArrayHeader(ArrayType *array, Oid elemtype, int count, Size elem_size)
{
	array->ndim = count > 0 ? 1 : 0;
	array->dataoffset = 0;
	array->elemtype = elemtype;
	if (count > 0)
	{
		ARR_DIMS(array)[0] = count;
		ARR_LBOUND(array)[0] = 1;
		SET_VARSIZE(array, ARR_OVERHEAD_NONULLS(1) + elem_size * count);
	}
	else
		SET_VARSIZE(array, ARR_OVERHEAD_NONULLS(0));
	return PointerGetDatum(array);
}

Datum
tsdg_search_batch_arrays(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TsdgBatchCall call;
	ArrayType  *tid_array;
	ArrayType  *dist_array;
	Size		tid_bytes;
	Size		dist_bytes;
	int			row = 0;		/* the next searchable query */

	InitMaterializedSRF(fcinfo, 0);
	TsdgBatchSearch(fcinfo, false, "tsdg_search_batch_arrays", &call);

	/* tid and real elements need no alignment padding (typalign s and i, sizes 6 and 4) */
	StaticAssertStmt(sizeof(ItemPointerData) == 6, "tid arrays are packed 6-byte elements");
	tid_bytes = ARR_OVERHEAD_NONULLS(1) + sizeof(ItemPointerData) * call.k;
	dist_bytes = ARR_OVERHEAD_NONULLS(1) + sizeof(float4) * call.k;
	/* one buffer per column for every row: the tuplestore copies the arrays into its tuples */
	tid_array = palloc0(tid_bytes);
	dist_array = palloc0(dist_bytes);
	for (int ordinal = 1; ordinal <= call.queries.count; ordinal++)
	{
		Datum		values[3];
		bool		row_nulls[3] = {false, false, false};
		int			found = 0;

		/* a zero query under cosine, or an index on an empty table: a row with no neighbor */
		if (row < call.queries.searchable && call.queries.ordinal[row] == ordinal)
		{
			const ItemPointerData *tids = call.tids + (Size) row * call.k;
			const float *dists = call.dists + (Size) row * call.k;
			float4	   *out = (float4 *) TsdgArrayData(dist_array);

			while (found < call.k && ItemPointerIsValid(&tids[found]))
			{
				out[found] = TsdgBatchDistance(&call, dists[found]);
				found++;
			}
			memcpy(TsdgArrayData(tid_array), tids, sizeof(ItemPointerData) * found);
			row++;
		}
		values[0] = Int32GetDatum(ordinal);
		values[1] = TsdgSetArrayHeader(tid_array, TIDOID, found, sizeof(ItemPointerData));
		values[2] = TsdgSetArrayHeader(dist_array, FLOAT4OID, found, sizeof(float4));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, row_nulls);
	}
	TsdgBatchFinish(&call, "tsdg_search_batch_arrays");
	return (Datum) 0;
}
