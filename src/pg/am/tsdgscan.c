/*
 * Ordered scans of a tsdg index: ORDER BY col <op> query [LIMIT k].
 *
 * The first amgettuple call scans the pending rows exactly and runs the
 * core's incremental graph search (tsdg_search_*) for tsdg.ef_search
 * candidates, reading row and list records from shared buffers; both lists are
 * merged in distance order. When the executor wants more rows than that
 * round produced (a filter above the scan threw rows away), the search is
 * widened with a doubled ef and continues, skipping nodes already returned,
 * until tsdg.max_scan_tuples graph rows were returned, its memory passed
 * work_mem x tsdg.scan_mem_multiplier or the graph has no more to give. Each
 * round also scores the nodes the last merge found its searches do not reach
 * (TsdgOfferUnreached). A wider round can find a node nearer than rows
 * already returned; it is returned next rather than dropped, so order across
 * rounds is approximate. When the search stops, the nodes it did not return
 * (those no walk reaches among them) are scored exactly, in one pass over the
 * row pages, and returned in distance order (TsdgScoreRest): an ordered scan
 * returns every row. Deleted nodes route the search but are never returned.
 * tsdg.iterative_scan changes that as pgvector's hnsw.iterative_scan does:
 * off ends the scan after tsdg.ef_search rows, strict_order leaves out the
 * rows nearer than one already returned; relaxed_order is the default.
 *
 * Node pages only change by VACUUM setting a deleted flag, so every read
 * of a flag or TID takes a share lock on one page, copies what it needs and
 * lets go; the graph walk reads vectors under a pin alone (tsdgscanwalk.c).
 *
 * With the GPU worker running, the first round is answered by the worker
 * (TsdgWorkerRound) instead of by reading pages here; wider rounds are
 * searched here. When the worker holds the index's pending rows
 * (tsdg.worker_pending_rows), its round has the nearest of them too, and
 * this scan reads them from the pages only if it goes past that round.
 */
#include "postgres.h"

#include <math.h>

#include "access/relscan.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"
#include "tsdgipc.h"
#include "tsdgworkerclient.h"

/* a pending row scored against the query */
typedef struct TsdgPendingHit
{
	ItemPointerData tid;
	float		distance;
} TsdgPendingHit;

typedef struct TsdgScanOpaqueData
{
	MemoryContext ctx;			/* all of one scan; reset by amrescan */
	MemoryContext graph_ctx;	/* the graph search's part of it */
	TsdgMetric	metric;
	bool		started;
	Buffer		meta_pin;		/* see TsdgStartScan */

	/* tsdg.iterative_scan and the graph search's memory bound at the start */
	int			iterative;		/* TsdgIterativeScan */
	double		max_graph_memory;
	int64		returned;		/* rows returned, graph and pending */
	float		last_distance;	/* of the last row returned */

	/* set up by the first amgettuple call */
	TsdgMetaPageData meta;
	TsdgLayout	layout;
	float	   *query;
	bool		query_null;
	bool		query_zero;		/* a zero query under cosine has no direction */

	/* the graph search and its current round of results */
	TsdgSearch *search;
	int			ef;
	uint32	   *result_ids;
	float	   *result_dists;
	ItemPointerData *result_tids;	/* the worker's round: TIDs (invalid: deleted) */
	int			result_count;
	int			result_pos;

	/*
	 * bit per node: returned or skipped as deleted. Made once the first round
	 * is widened or TSDG_LISTED_CONSUMED of its rows are consumed: until then
	 * the nodes consumed are the round's first result_pos, so a query
	 * answered by a few rows of one round zeroes no bitmap of node_count bits.
	 */
	uint8	   *consumed;
	int64		consumed_count;
	int64		graph_returned;
	bool		graph_done;		/* the graph search stopped */
	bool		rest_started;	/* the rows it left are this round's */
	bool		rest_done;
	bool		head_valid;		/* the round's next row, read but not returned */
	uint32		head_id;
	ItemPointerData head_tid;
	float		head_distance;
	TsdgPageWalk walk;			/* the graph search's reads of the pages */

	/*
	 * rows the round had: a round of the worker that searched the pending
	 * rows too holds fewer graph rows than that
	 */
	int			round_rows;

	/*
	 * The pending rows, ascending by distance: all of them, or, while
	 * pending_from_worker, only those the worker's round had, which leaves
	 * out none nearer than pending_bound.
	 */
	TsdgPendingHit *pending;
	int64		pending_count;
	int64		pending_capacity;
	int64		pending_pos;
	bool		pending_from_worker;
	float		pending_bound;
} TsdgScanOpaqueData;

typedef TsdgScanOpaqueData *TsdgScanOpaque;

static void
TsdgFreeSearch(void *arg)
{
	TsdgScanOpaque so = (TsdgScanOpaque) arg;

	if (so->search != NULL)
		tsdg_search_free(so->search);
	so->search = NULL;
}

#define TSDG_LISTED_CONSUMED	64

static inline bool
TsdgConsumed(TsdgScanOpaque so, uint32 id)
{
	if (so->consumed == NULL)
	{
		for (int i = 0; i < so->result_pos; i++)
			if (so->result_ids[i] == id)
				return true;
		return false;
	}
	return (so->consumed[id / 8] & (1 << (id % 8))) != 0;
}

static inline void
TsdgMarkConsumed(TsdgScanOpaque so, uint32 id)
{
	if (so->consumed != NULL)
		so->consumed[id / 8] |= (1 << (id % 8));
	so->consumed_count++;
}

/* the bitmap of consumed nodes, from the first round's consumed rows */
static void
TsdgMakeConsumedBitmap(TsdgScanOpaque so)
{
	if (so->consumed != NULL)
		return;
	so->consumed = MemoryContextAllocExtended(so->graph_ctx, so->meta.node_count / 8 + 1,
											  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	for (int i = 0; i < so->result_pos; i++)
		so->consumed[so->result_ids[i] / 8] |= (1 << (so->result_ids[i] % 8));
}

/* heap TID and deleted flag of a node */
static bool
TsdgReadNodeTid(Relation index, TsdgScanOpaque so, uint32 id, ItemPointer tid)
{
	Buffer		buf = ReadBuffer(index, TsdgRowBlock(&so->layout, id));
	TsdgNodeHeader *hdr;
	bool		deleted;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	hdr = (TsdgNodeHeader *) TsdgRowRecord(&so->layout, BufferGetPage(buf), id);
	*tid = hdr->heaptid;
	deleted = (hdr->flags & TSDG_NODE_DELETED) != 0;
	UnlockReleaseBuffer(buf);
	return !deleted;
}

/*
 * The nodes the last merge found its searches do not reach (tsdg.h) join the
 * candidates once the walk is done, those it did not see scored exactly: the
 * walk itself stays the one the merge checked.
 */
static void
TsdgOfferUnreached(Relation index, TsdgScanOpaque so)
{
	int			count = so->meta.unreached_count;
	uint8	   *no_lambdas;
	uint32	   *fresh;
	int			unseen;

	if (count == 0)
		return;
	no_lambdas = palloc0(sizeof(uint8) * count);
	fresh = palloc(sizeof(uint32) * count);
	unseen = tsdg_search_unvisited(so->search, so->meta.unreached, no_lambdas, count, fresh);
	TsdgWalkOffer(&so->walk, so->search, fresh, unseen);
	pfree(no_lambdas);
	pfree(fresh);
}

/*
 * The first round by the GPU worker, when it runs: the ids and distances it
 * returns are read like a round of our own. A wider round later is searched
 * here, from the entry points, skipping the nodes already returned.
 */
static bool
TsdgWorkerRound(Relation index, TsdgScanOpaque so)
{
	bool		pending_searched;
	int			graph_rows = 0;
	TsdgWorkerResults results;

	so->result_ids = repalloc(so->result_ids, sizeof(uint32) * so->ef);
	so->result_dists = repalloc(so->result_dists, sizeof(float) * so->ef);
	so->result_tids = palloc(sizeof(ItemPointerData) * so->ef);
	results.ids = so->result_ids;
	results.dists = so->result_dists;
	results.tids = so->result_tids;
	if (!TsdgWorkerSearch(index, &so->meta, so->query, so->ef, so->ef, tsdg_lambda_search,
						  &results))
	{
		pfree(so->result_tids);
		so->result_tids = NULL;
		return false;
	}
	so->result_count = results.count;
	pending_searched = results.pending_searched;
	so->pending_bound = results.pending_bound;
	so->round_rows = so->result_count;
	so->pending_from_worker = pending_searched;
	if (pending_searched)
	{
		so->pending_capacity = Max(so->result_count, 16);
		so->pending = MemoryContextAlloc(so->ctx, sizeof(TsdgPendingHit) * so->pending_capacity);
	}
	/* the pending rows of the round to their own list, both ascending still */
	for (int i = 0; i < so->result_count; i++)
	{
		if (pending_searched && so->result_ids[i] == TSDG_PENDING_ROW_ID)
		{
			so->pending[so->pending_count].tid = so->result_tids[i];
			so->pending[so->pending_count++].distance = so->result_dists[i];
			continue;
		}
		TsdgCheckScanNode(index, so->result_ids[i], so->meta.node_count);
		so->result_ids[graph_rows] = so->result_ids[i];
		so->result_dists[graph_rows] = so->result_dists[i];
		so->result_tids[graph_rows++] = so->result_tids[i];
	}
	so->result_count = graph_rows;
	so->result_pos = 0;
	return true;
}

/*
 * One round of the graph search at so->ef: the first round starts from the
 * navigating layer's walk, or from the navigating set (the metapage's entry
 * points and the strided nodes) where the graph has no layer; later ones
 * widen the previous round.
 */
static void
TsdgGraphRound(Relation index, TsdgScanOpaque so, bool first)
{
	MemoryContext old_ctx = MemoryContextSwitchTo(so->graph_ctx);
	int64		layer_scored;

	if (first && TsdgWorkerRound(index, so))
	{
		MemoryContextSwitchTo(old_ctx);
		return;
	}
	/* a first round, or a wider one after the worker answered the first */
	if (so->search == NULL)
	{
		TsdgError	error;
		MemoryContextCallback *cb;

		so->search = tsdg_search_create(tsdg_lambda_search, 0.0f, &error);
		if (so->search == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not start a tsdg search: %s", error.message)));
		cb = palloc(sizeof(MemoryContextCallback));
		cb->func = TsdgFreeSearch;
		cb->arg = so;
		MemoryContextRegisterResetCallback(so->graph_ctx, cb);

		tsdg_search_begin(so->search, so->ef);
		TsdgOfferNavigatingSet(&so->walk, so->search, &so->meta, so->ef, &layer_scored);
		/* what the search profile (tsdgprofile.c) counts of the layer's walk */
		if (layer_scored > 0)
			ereport(DEBUG1,
					(errmsg_internal("tsdg index \"%s\": the navigating layer's walk at ef %d has scored " INT64_FORMAT " rows",
									 RelationGetRelationName(index), so->ef, layer_scored)));
	}
	else
		tsdg_search_widen(so->search, so->ef);
	/* this round's results come with no TIDs: they are read from the pages */
	so->result_tids = NULL;

	TsdgWalkExpand(&so->walk, so->search);
	/* what the search profile (tsdgprofile.c) counts of a first round, to check the planner's prices by */
	ereport(DEBUG1,
			(errmsg_internal("tsdg index \"%s\": the graph walk at ef %d has scored " INT64_FORMAT " rows",
							 RelationGetRelationName(index), so->ef,
							 tsdg_search_distance_count(so->search))));
	TsdgOfferUnreached(index, so);
	{
		TsdgError	error;

		if (tsdg_search_status(so->search, &error) != TSDG_OK)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("tsdg search failed: %s", error.message)));
	}

	so->result_ids = repalloc(so->result_ids, sizeof(uint32) * so->ef);
	so->result_dists = repalloc(so->result_dists, sizeof(float) * so->ef);
	so->result_count = tsdg_search_results(so->search, so->result_ids, so->result_dists, so->ef);
	so->round_rows = so->result_count;
	so->result_pos = 0;
	MemoryContextSwitchTo(old_ctx);
}

static int
TsdgComparePendingHits(const void *a, const void *b)
{
	float		da = ((const TsdgPendingHit *) a)->distance;
	float		db = ((const TsdgPendingHit *) b)->distance;

	return (da > db) - (da < db);
}

static void
TsdgScorePendingRow(void *arg, const ItemPointerData *tid, const float *vector)
{
	TsdgScanOpaque so = (TsdgScanOpaque) arg;
	TsdgPendingHit *hit;

	if (so->pending_count == so->pending_capacity)
	{
		so->pending_capacity *= 2;
		so->pending = repalloc_huge(so->pending, sizeof(TsdgPendingHit) * so->pending_capacity);
	}
	hit = &so->pending[so->pending_count++];
	hit->tid = *tid;
	hit->distance = tsdg_metric_distance(so->metric, so->query, vector, so->layout.dims);
}

/* Scores every pending row against the query, ascending. */
static void
TsdgScanPending(Relation index, TsdgScanOpaque so)
{
	so->pending_capacity = Max(so->meta.pending_count, 16);
	so->pending = MemoryContextAllocHuge(so->ctx, sizeof(TsdgPendingHit) * so->pending_capacity);
	so->pending_count = 0;
	TsdgVisitPendingRows(index, &so->layout, so->meta.pending_head, InvalidBlockNumber,
						 TsdgScorePendingRow, so);

	qsort(so->pending, so->pending_count, sizeof(TsdgPendingHit), TsdgComparePendingHits);
	so->pending_pos = 0;
}

static int
TsdgComparePendingTids(const void *a, const void *b)
{
	return ItemPointerCompare(&((TsdgPendingHit *) a)->tid, &((TsdgPendingHit *) b)->tid);
}

/*
 * The scan goes past the worker's round, which had only the nearest pending
 * rows: all of them are scored here, less those already returned.
 */
static void
TsdgTakeOverPending(Relation index, TsdgScanOpaque so)
{
	MemoryContext old_ctx = MemoryContextSwitchTo(so->ctx);
	TsdgPendingHit *returned = so->pending;
	int64		returned_count = so->pending_pos;
	int64		kept = 0;

	qsort(returned, returned_count, sizeof(TsdgPendingHit), TsdgComparePendingTids);
	so->pending_from_worker = false;
	TsdgScanPending(index, so);
	for (int64 i = 0; i < so->pending_count; i++)
		if (bsearch(&so->pending[i], returned, returned_count, sizeof(TsdgPendingHit),
					TsdgComparePendingTids) == NULL)
			so->pending[kept++] = so->pending[i];
	so->pending_count = kept;
	pfree(returned);
	MemoryContextSwitchTo(old_ctx);
}

static void
TsdgStartScan(IndexScanDesc scan)
{
	TsdgScanOpaque so = (TsdgScanOpaque) scan->opaque;
	MemoryContext old_ctx = MemoryContextSwitchTo(so->ctx);
	ScanKey		orderby = &scan->orderByData[0];

	/*
	 * The metapage stays pinned until the scan ends: a merge reuses the
	 * pages of the graph this scan reads only once no such pin is left
	 * (tsdgmergeswitch.c).
	 */
	so->meta_pin = ReadBuffer(scan->indexRelation, TSDG_METAPAGE_BLKNO);
	TsdgReadMeta(scan->indexRelation, &so->meta);
	TsdgLayoutFromMeta(&so->layout, &so->meta);

	so->query_null = (orderby->sk_flags & SK_ISNULL) != 0;
	so->query_zero = false;
	if (so->query_null)
		so->query = palloc0(sizeof(float) * Max(so->layout.dims, 1));
	else
	{
		int			dims;

		so->query = TsdgPrepareVector(orderby->sk_argument, so->metric, &dims);
		if (so->query == NULL)
		{
			so->query_zero = true;
			so->query = palloc0(sizeof(float) * Max(dims, 1));
		}
		if (so->layout.dims != 0 && dims != so->layout.dims)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("different vector dimensions %d and %d", so->layout.dims, dims)));
	}

	so->pending = NULL;
	so->pending_count = 0;
	so->pending_pos = 0;
	so->pending_from_worker = false;

	so->ef = tsdg_ef_search;
	so->iterative = tsdg_iterative_scan;
	so->max_graph_memory = (double) work_mem * 1024.0 * tsdg_scan_mem_multiplier;
	so->returned = 0;
	so->last_distance = -get_float4_infinity();
	so->graph_ctx = AllocSetContextCreate(so->ctx, "tsdg scan graph search", ALLOCSET_DEFAULT_SIZES);
	so->result_ids = MemoryContextAlloc(so->graph_ctx, sizeof(uint32));
	so->result_dists = MemoryContextAlloc(so->graph_ctx, sizeof(float));
	so->result_count = 0;
	so->result_pos = 0;
	so->graph_returned = 0;
	so->consumed_count = 0;
	so->head_valid = false;
	so->graph_done = so->meta.node_count == 0;
	so->rest_started = false;
	so->rest_done = so->graph_done;
	if (!so->graph_done)
	{
		so->consumed = NULL;
		TsdgWalkInit(&so->walk, scan->indexRelation, &so->layout, so->metric, so->query,
					 so->meta.node_count);
		TsdgGraphRound(scan->indexRelation, so, true);
	}
	if (!so->pending_from_worker)
		TsdgScanPending(scan->indexRelation, so);
	MemoryContextSwitchTo(old_ctx);
}

typedef struct TsdgRestHit
{
	uint32		id;
	float		distance;
	ItemPointerData tid;
} TsdgRestHit;

static int
TsdgCompareRestHits(const void *a, const void *b)
{
	float		da = ((const TsdgRestHit *) a)->distance;
	float		db = ((const TsdgRestHit *) b)->distance;

	if (da != db)
		return (da > db) - (da < db);
	return (((const TsdgRestHit *) a)->id > ((const TsdgRestHit *) b)->id) -
		(((const TsdgRestHit *) a)->id < ((const TsdgRestHit *) b)->id);
}

/*
 * The last round: every live node not returned yet, scored exactly in one
 * pass over the row pages (each page read once, in order) and sorted by
 * distance. It holds the nodes no walk from the entry points reaches, which a
 * graph can have (many identical vectors keep few edges among themselves),
 * so that an ordered scan never ends before the table does.
 */
static void
TsdgScoreRest(Relation index, TsdgScanOpaque so)
{
	MemoryContext old_ctx = MemoryContextSwitchTo(so->ctx);
	int64		capacity = Max((int64) so->meta.node_count - so->consumed_count, 1);
	TsdgRestHit *hits = MemoryContextAllocHuge(so->ctx, sizeof(TsdgRestHit) * capacity);
	int64		count = 0;
	Buffer		buf = InvalidBuffer;
	BlockNumber held = InvalidBlockNumber;

	TsdgMakeConsumedBitmap(so);
	for (uint32 id = 0; id < so->meta.node_count; id++)
	{
		BlockNumber block;
		TsdgNodeHeader *hdr;

		if (TsdgConsumed(so, id))
			continue;
		block = TsdgRowBlock(&so->layout, id);
		if (block != held)
		{
			if (BufferIsValid(buf))
				UnlockReleaseBuffer(buf);
			buf = ReadBuffer(index, block);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			held = block;
			CHECK_FOR_INTERRUPTS();
		}
		hdr = (TsdgNodeHeader *) TsdgRowRecord(&so->layout, BufferGetPage(buf), id);
		if ((hdr->flags & TSDG_NODE_DELETED) != 0)
			continue;
		if (count == capacity)
		{
			capacity *= 2;
			hits = repalloc_huge(hits, sizeof(TsdgRestHit) * capacity);
		}
		hits[count].id = id;
		hits[count].tid = hdr->heaptid;
		hits[count].distance = tsdg_metric_distance(so->metric, so->query, TsdgRecordVector(hdr),
													so->layout.dims);
		count++;
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
	qsort(hits, count, sizeof(TsdgRestHit), TsdgCompareRestHits);

	so->result_ids = repalloc_huge(so->result_ids, sizeof(uint32) * Max(count, 1));
	so->result_dists = repalloc_huge(so->result_dists, sizeof(float) * Max(count, 1));
	so->result_tids = MemoryContextAllocHuge(so->ctx, sizeof(ItemPointerData) * Max(count, 1));
	for (int64 i = 0; i < count; i++)
	{
		so->result_ids[i] = hits[i].id;
		so->result_dists[i] = hits[i].distance;
		so->result_tids[i] = hits[i].tid;
	}
	pfree(hits);
	so->result_count = (int) count;
	so->round_rows = (int) count;
	so->result_pos = 0;
	so->rest_started = true;
	MemoryContextSwitchTo(old_ctx);
}

/*
 * Whether the graph search's memory passed work_mem x tsdg.scan_mem_multiplier:
 * this scan's arrays of it (the rounds' results, the bitmap of nodes
 * returned) and the core search's visited set and candidates, which live
 * outside PostgreSQL's memory contexts.
 */
static bool
TsdgGraphMemoryExceeded(TsdgScanOpaque so)
{
	double		bytes = (double) MemoryContextMemAllocated(so->graph_ctx, true);

	if (so->search != NULL)
		bytes += (double) tsdg_search_memory_bytes(so->search);
	if (bytes <= so->max_graph_memory)
		return false;
	ereport(DEBUG1,
			(errmsg("tsdg index scan passed work_mem x tsdg.scan_mem_multiplier after " INT64_FORMAT " graph rows; the rows left are scored exactly",
					so->graph_returned),
			 errhint("Increase tsdg.scan_mem_multiplier to search the graph further.")));
	return true;
}

/*
 * The next graph row not returned yet, widening the search when the current
 * round is used up. False when the graph has nothing more to return.
 */
static bool
TsdgNextGraphRow(Relation index, TsdgScanOpaque so)
{
	while (!so->rest_done)
	{
		if (!so->graph_done && so->graph_returned >= tsdg_max_scan_tuples)
			so->graph_done = true;
		if (so->graph_done && !so->rest_started)
		{
			/* past the worker's round, which had only the nearest pending rows */
			if (so->pending_from_worker)
				TsdgTakeOverPending(index, so);
			TsdgScoreRest(index, so);
		}
		while (so->result_pos < so->result_count)
		{
			uint32		id = so->result_ids[so->result_pos];
			bool		live;

			if (so->consumed == NULL && so->result_pos >= TSDG_LISTED_CONSUMED)
				TsdgMakeConsumedBitmap(so);

			if (TsdgConsumed(so, id))
			{
				so->result_pos++;
				continue;
			}
			if (so->result_tids != NULL)
			{
				so->head_tid = so->result_tids[so->result_pos];
				live = ItemPointerIsValid(&so->head_tid);
			}
			else
				live = TsdgReadNodeTid(index, so, id, &so->head_tid);
			if (!live)
			{
				TsdgMarkConsumed(so, id);
				so->result_pos++;
				continue;
			}
			so->head_id = id;
			so->head_distance = so->result_dists[so->result_pos];
			return true;
		}
		if (so->rest_started)
		{
			so->rest_done = true;
			break;
		}

		/*
		 * This round is used up: what follows may be farther than pending
		 * rows the worker's round did not have. A round that holds fewer
		 * than ef rows saw every node it could reach, so only a full round is
		 * worth widening.
		 */
		if (so->pending_from_worker)
			TsdgTakeOverPending(index, so);
		if (so->iterative == TSDG_ITERATIVE_SCAN_OFF)
		{
			so->graph_done = so->rest_done = true;
			break;
		}
		if (so->round_rows < so->ef || (int64) so->ef >= (int64) so->meta.node_count ||
			TsdgGraphMemoryExceeded(so))
			so->graph_done = true;
		else
		{
			so->ef = (int) Min((int64) so->ef * 2, (int64) so->meta.node_count);
			TsdgMakeConsumedBitmap(so);
			TsdgGraphRound(index, so, false);
		}
	}
	return false;
}

/* the value of the ORDER BY expression for a comparison distance */
static Datum
TsdgOrderByValue(TsdgScanOpaque so, float distance)
{
	if (so->query_zero)
		return Float8GetDatum(get_float8_nan());
	if (so->metric == TSDG_METRIC_L2)
		return Float8GetDatum(sqrt((double) Max(distance, 0.0f)));
	return Float8GetDatum((double) distance);
}

IndexScanDesc
tsdgbeginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	TsdgScanOpaque so = palloc0(sizeof(TsdgScanOpaqueData));

	so->ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg scan", ALLOCSET_DEFAULT_SIZES);
	so->metric = TsdgIndexMetric(index);
	scan->opaque = so;
	scan->xs_orderbyvals = palloc0(sizeof(Datum) * Max(norderbys, 1));
	scan->xs_orderbynulls = palloc(sizeof(bool) * Max(norderbys, 1));
	return scan;
}

void
tsdgrescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	TsdgScanOpaque so = (TsdgScanOpaque) scan->opaque;

	if (BufferIsValid(so->meta_pin))
		ReleaseBuffer(so->meta_pin);
	so->meta_pin = InvalidBuffer;
	/* frees the previous scan's search through its reset callback */
	MemoryContextReset(so->ctx);
	so->search = NULL;
	so->started = false;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
}

bool
tsdggettuple(IndexScanDesc scan, ScanDirection dir)
{
	TsdgScanOpaque so = (TsdgScanOpaque) scan->opaque;
	bool		pending_left;
	float		distance;

	if (!ScanDirectionIsForward(dir))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("tsdg index scans only go forward")));
	if (scan->numberOfOrderBys == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a tsdg index can only be scanned in the order of a distance operator")));

	if (!so->started)
	{
		/* idx_scan of pg_stat_user_indexes, as the core's access methods count */
		pgstat_count_index_scan(scan->indexRelation);
		TsdgStartScan(scan);
		so->started = true;
	}

	/* a scan that does not go on never widens: its ef is still tsdg.ef_search */
	if (so->iterative == TSDG_ITERATIVE_SCAN_OFF && so->returned >= so->ef)
		return false;
	do
	{
		if (!so->head_valid)
			so->head_valid = TsdgNextGraphRow(scan->indexRelation, so);
		/* a graph row past the worker's pending rows may come after some it left out */
		if (so->pending_from_worker && so->head_valid && so->head_distance > so->pending_bound)
			TsdgTakeOverPending(scan->indexRelation, so);
		pending_left = so->pending_pos < so->pending_count;

		if (so->head_valid &&
			(!pending_left || so->head_distance <= so->pending[so->pending_pos].distance))
		{
			scan->xs_heaptid = so->head_tid;
			distance = so->head_distance;
			TsdgMarkConsumed(so, so->head_id);
			so->result_pos++;
			so->graph_returned++;
			so->head_valid = false;
		}
		else if (pending_left)
		{
			scan->xs_heaptid = so->pending[so->pending_pos].tid;
			distance = so->pending[so->pending_pos].distance;
			so->pending_pos++;
		}
		else
			return false;
	} while (so->iterative == TSDG_ITERATIVE_SCAN_STRICT && distance < so->last_distance);
	so->returned++;
	so->last_distance = distance;

	scan->xs_recheck = false;
	scan->xs_recheckorderby = false;
	scan->xs_orderbyvals[0] = TsdgOrderByValue(so, distance);
	scan->xs_orderbynulls[0] = so->query_null;
	return true;
}

void
tsdgendscan(IndexScanDesc scan)
{
	TsdgScanOpaque so = (TsdgScanOpaque) scan->opaque;

	if (BufferIsValid(so->meta_pin))
		ReleaseBuffer(so->meta_pin);
	MemoryContextDelete(so->ctx);
	pfree(so);
	scan->opaque = NULL;
}
