/*
 * The GPU server's SQL batch searches (runs in the GPU server process): a
 * batch of tsdg_search_batch queries in the batch area or a segment of the
 * session's own, answered as heap TIDs, deleted nodes left out.
 *
 * One batch may hold thousands of queries at a wide ef: searched in one call
 * it would keep every other session's index scans waiting (out to
 * tsdg.worker_timeout_ms, then on the CPU) and go on after its session was
 * cancelled. So a batch is searched in parts sized to take about
 * TSDG_BATCH_SLICE_US each, from the time its earlier parts took; between
 * two parts the server takes the requests queued meanwhile, and the running
 * batches take turns, a part each. A batch whose session gave it up (a
 * cancel, statement_timeout, the session's exit) is dropped at its next part.
 */
#include "postgres.h"

#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/* batches this large get a LOG line with their time, and when dropped */
#define TSDG_LOGGED_BATCH		1000

/* how long one part of a batch may keep the other requests waiting */
#define TSDG_BATCH_SLICE_US		10000

/*
 * The first part's size, before a part of the batch was timed: queries times
 * ef (a search's cost grows about linearly with ef).
 */
#define TSDG_BATCH_FIRST_PART_WORK	16384

/* a part is at most this many times the last one, so that one fast part cannot hold the worker long */
#define TSDG_BATCH_PART_GROWTH	4

/* a batch the server took and has not answered yet */
typedef struct RunningBatch
{
	TakenRequest t;
	BulkMapping map;
	int			next;			/* the first query not searched yet */
	int			part;			/* queries in the next part */
	/* the worker's copy of the pending rows covered the request when it was taken */
	bool		pending_searched;
	TimestampTz start;
} RunningBatch;

static RunningBatch *running = NULL;	/* one per slot at most */
static int	running_count = 0;

/*
 * r's unreached rows merged into a batch's answers (heap TIDs, k per query,
 * deleted nodes left out), a row once.
 */
static TsdgStatus
MergeUnreachedTids(const ResidentIndex *r, const float *queries, int nq, int k,
				   ItemPointerData *tids, float *dists, TsdgError *error)
{
	int			uk = (int) Min(k, r->unreached_count);
	uint32	   *positions;
	float	   *hit_dists;
	ItemPointerData *hit_tids;
	ItemPointerData *scratch_tids;
	float	   *scratch_dists;
	ItemPointerData missing;
	TsdgStatus	status;

	if (uk == 0 || nq == 0)
		return TSDG_OK;
	ItemPointerSetInvalid(&missing);
	status = TsdgSearchUnreached(r, queries, nq, uk, &positions, &hit_dists, error);
	hit_tids = palloc(sizeof(ItemPointerData) * uk);
	scratch_tids = palloc(sizeof(ItemPointerData) * k);
	scratch_dists = palloc(sizeof(float) * k);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		const uint32 *qpos = positions + (Size) q * uk;
		float	   *qdists = hit_dists + (Size) q * uk;
		int			hits = 0;

		for (int j = 0; j < uk && qpos[j] != TSDG_INVALID_ID; j++)
		{
			uint32		node = r->unreached[qpos[j]];

			if (r->flags != NULL && (r->flags[node] & TSDG_NODE_DELETED) != 0)
				continue;
			hit_tids[hits] = r->tids[node];
			qdists[hits++] = qdists[j];
		}
		TsdgMergeExactHits(k, tids + (Size) q * k, dists + (Size) q * k, sizeof(ItemPointerData),
						   &missing, hit_tids, qdists, hits, scratch_tids, scratch_dists);
	}
	pfree(positions);
	pfree(hit_dists);
	pfree(hit_tids);
	pfree(scratch_tids);
	pfree(scratch_dists);
	return status;
}

/*
 * The pending rows' k nearest merged into a batch's answers (tids, dists:
 * nq * k in the segment, the graph's nearest first, invalid TIDs after the
 * last).
 */
static TsdgStatus
MergePendingIntoBatch(const ResidentIndex *r, const float *queries, int nq, int k,
					  ItemPointerData *tids, float *dists, TsdgError *error)
{
	uint32	   *pending_pos = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * k * (Size) nq);
	float	   *pending_dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * k * (Size) nq);
	float	   *out_dists = palloc(sizeof(float) * k);
	ItemPointerData *out_tids = palloc(sizeof(ItemPointerData) * k);
	TsdgStatus	status;

	status = tsdg_exact_set_search(r->pending, queries, nq, k, pending_pos, pending_dists, error);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		ItemPointerData *qtids = tids + (Size) q * k;
		float	   *qdists = dists + (Size) q * k;
		int			graph_count = 0;
		int			count;

		while (graph_count < k && ItemPointerIsValid(&qtids[graph_count]))
			graph_count++;
		count = TsdgMergePendingResults(r, k, graph_count, qdists, NULL, qtids, k,
										pending_pos + (Size) q * k, pending_dists + (Size) q * k,
										out_dists, NULL, out_tids);
		memcpy(qtids, out_tids, sizeof(ItemPointerData) * count);
		memcpy(qdists, out_dists, sizeof(float) * count);
		for (int i = count; i < k; i++)
		{
			ItemPointerSetInvalid(&qtids[i]);
			qdists[i] = get_float4_infinity();
		}
	}
	pfree(pending_pos);
	pfree(pending_dists);
	pfree(out_dists);
	pfree(out_tids);
	return status;
}

/*
 * The graph's k nearest rows of nq queries, deleted nodes left out: a node
 * deleted near a query takes a place among its nearest candidates, so the
 * queries that come short of k rows are searched again for twice as many
 * candidates, until none does or every deleted node could have been skipped.
 */
static TsdgStatus
SearchSkippingDeleted(const ResidentIndex *r, const TsdgSearchArgs *args, const float *queries,
					  int nq, ItemPointerData *tids, float *dists, TsdgError *error)
{
	int			k = args->k;
	int64		most_k = k;
	int			wide_k;
	int		   *short_queries;
	float	   *short_rows;
	ItemPointerData *short_tids;
	float	   *short_dists;
	TsdgStatus	status;

	if (r->flags != NULL)
		most_k = Min((int64) k + args->key.deleted_count, Min(r->n, (int64) INT_MAX / 2));
	most_k = Max(most_k, k);
	wide_k = (int) Min((int64) k + Min(k, (int64) args->key.deleted_count), most_k);
	status = tsdg_index_search_payload(r->index, queries, nq, wide_k, k, Max(args->ef, wide_k),
									   args->lambda_limit, tids, dists, error);
	if (status != TSDG_OK || wide_k >= most_k)
		return status;

	short_queries = palloc(sizeof(int) * nq);
	short_rows = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * args->dims * (Size) nq);
	short_tids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(ItemPointerData) * k * (Size) nq);
	short_dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * k * (Size) nq);
	while (status == TSDG_OK && wide_k < most_k)
	{
		int			nshort = 0;

		for (int q = 0; q < nq; q++)
			if (!ItemPointerIsValid(&tids[(Size) q * k + k - 1]))
			{
				memcpy(short_rows + (Size) nshort * args->dims, queries + (Size) q * args->dims,
					   sizeof(float) * args->dims);
				short_queries[nshort++] = q;
			}
		if (nshort == 0)
			break;
		wide_k = (int) Min((int64) wide_k * 2, most_k);
		status = tsdg_index_search_payload(r->index, short_rows, nshort, wide_k, k,
										   Max(args->ef, wide_k), args->lambda_limit,
										   short_tids, short_dists, error);
		for (int s = 0; s < nshort && status == TSDG_OK; s++)
		{
			memcpy(tids + (Size) short_queries[s] * k, short_tids + (Size) s * k,
				   sizeof(ItemPointerData) * k);
			memcpy(dists + (Size) short_queries[s] * k, short_dists + (Size) s * k,
				   sizeof(float) * k);
		}
	}
	pfree(short_queries);
	pfree(short_rows);
	pfree(short_tids);
	pfree(short_dists);
	return status;
}

/* before the answer: the session may give the batch area to another once it has it */
static void
LetGoOfBatchArea(const TakenRequest *t)
{
	if (t->copy.in_batch_area)
		TsdgIpcLetGoOfBatchArea();
}

/*
 * Answers a batch and forgets it; CANCELLED: its session gave it up, and no
 * answer is written.
 */
static void
FinishBatch(int i, TsdgReply reply, const char *message)
{
	RunningBatch *b = &running[i];
	const TsdgSearchArgs *args = &b->t.copy.args.search;
	TsdgSearchAnswer answer = {0};

	TsdgUnmapBulk(&b->map);
	LetGoOfBatchArea(&b->t);
	if (reply == TSDG_REPLY_CANCELLED && args->nq >= TSDG_LOGGED_BATCH)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: dropped a batch of %d queries after %d of them: its session gave it up",
						args->nq, b->next)));
	if (reply == TSDG_REPLY_OK)
	{
		pg_atomic_fetch_add_u64(&TsdgShared->batches, 1);
		pg_atomic_fetch_add_u64(&TsdgShared->batched_queries, args->nq);
		if (args->nq >= TSDG_LOGGED_BATCH)
			ereport(LOG,
					(errmsg("pg_tsdg GPU worker: searched a batch of %d queries (k %d, ef %d) in %.3f ms",
							args->nq, args->k, Max(args->ef, args->k),
							TsdgSecondsSince(b->start) * 1000)));
	}
	answer.result_count = reply == TSDG_REPLY_OK ? args->nq : 0;
	answer.pending_searched = b->pending_searched && reply == TSDG_REPLY_OK;
	answer.pending_bound = get_float4_infinity();
	if (reply != TSDG_REPLY_CANCELLED)
		TsdgIpcAnswerSearch(b->t.slot, b->t.copy.request_id, reply, &answer, message);
	running[i] = running[--running_count];
}

/*
 * Takes a batch: answered at once when its index is not resident or its
 * segment does not hold what it says, else searched part by part from
 * TsdgContinueSearchBatches.
 */
void
TsdgStartSearchBatch(TakenRequest *t)
{
	const TsdgSearchArgs *args = &t->copy.args.search;
	ResidentIndex *r = TsdgFindResident(&args->key);
	BulkMapping map;
	TsdgBulkHeader *header;
	RunningBatch *b;

	t->done = true;
	if (r == NULL || r->dims != args->dims)
	{
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id,
					  r == NULL && TsdgPromiseLoad(&args->key) ? TSDG_REPLY_NEED_INDEX : TSDG_REPLY_NOT_RESIDENT, NULL);
		return;
	}
	TsdgDropOlderGraphs(r);
	if (!TsdgMapBulk(&t->copy, &map))
	{
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the batch's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	if (args->nq < 1 || args->k < 1 ||
		!TsdgBulkHasArray(&map, header->queries, (int64) args->nq * args->dims, sizeof(float), false) ||
		!TsdgBulkHasArray(&map, header->tids, (int64) args->nq * args->k, sizeof(ItemPointerData), false) ||
		!TsdgBulkHasArray(&map, header->dists, (int64) args->nq * args->k, sizeof(float), false))
	{
		TsdgUnmapBulk(&map);
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the batch's sizes do not fit its shared memory segment");
		return;
	}

	if (running == NULL)
		running = MemoryContextAllocZero(TopMemoryContext,
										 sizeof(RunningBatch) * TsdgShared->slot_count);
	/* a batch still running from this slot was given up: its session sent another request */
	for (int i = 0; i < running_count; i++)
		if (running[i].t.slot == t->slot)
		{
			FinishBatch(i, TSDG_REPLY_CANCELLED, NULL);
			break;
		}
	Assert(running_count < TsdgShared->slot_count);
	b = &running[running_count++];
	b->t = *t;
	b->map = map;
	b->next = 0;
	b->part = Max(1, Min(args->nq, TSDG_BATCH_FIRST_PART_WORK / Max(1, Max(args->ef, args->k))));
	b->pending_searched = TsdgPendingCopyCovers(r, args);
	b->start = GetCurrentTimestamp();
}

bool
TsdgSearchBatchesRunning(void)
{
	return running_count > 0;
}

/*
 * Searches the next part of the i-th running batch; true when the batch is
 * done with (answered, or dropped since its session gave it up).
 */
static bool
SearchNextPart(int i)
{
	RunningBatch *b = &running[i];
	const TsdgSearchArgs *args = &b->t.copy.args.search;
	TsdgBulkHeader *header = (TsdgBulkHeader *) b->map.address;
	int			count = Min(b->part, args->nq - b->next);
	float	   *queries = (float *) TsdgBulkArray(b->map.address, header->queries) +
		(Size) b->next * args->dims;
	ItemPointerData *tids = (ItemPointerData *) TsdgBulkArray(b->map.address, header->tids) +
		(Size) b->next * args->k;
	float	   *dists = (float *) TsdgBulkArray(b->map.address, header->dists) +
		(Size) b->next * args->k;
	/* looked up again for every part: a load or a newer graph may have dropped it meanwhile */
	ResidentIndex *r = TsdgFindResident(&args->key);
	TimestampTz start = GetCurrentTimestamp();
	int64		elapsed_us;
	TsdgError	error;
	TsdgStatus	status;

	if (TsdgIpcCancelRequested(b->t.slot, b->t.copy.request_id))
	{
		FinishBatch(i, TSDG_REPLY_CANCELLED, NULL);
		return true;
	}
	if (r == NULL)
	{
		FinishBatch(i, TSDG_REPLY_NOT_RESIDENT, NULL);
		return true;
	}
	if (b->pending_searched && !TsdgPendingCopyCovers(r, args))
	{
		FinishBatch(i, TSDG_REPLY_FAILED, "the worker's copy of the pending rows changed during the batch");
		return true;
	}

	r->last_used = start;
	status = SearchSkippingDeleted(r, args, queries, count, tids, dists, &error);
	if (status == TSDG_OK)
		status = MergeUnreachedTids(r, queries, count, args->k, tids, dists, &error);
	if (status == TSDG_OK && b->pending_searched)
		status = MergePendingIntoBatch(r, queries, count, args->k, tids, dists, &error);
	if (status != TSDG_OK)
	{
		FinishBatch(i, TsdgReplyOf(status), error.message);
		return true;
	}

	b->next += count;
	if (b->next >= args->nq)
	{
		FinishBatch(i, TSDG_REPLY_OK, NULL);
		return true;
	}
	elapsed_us = Max(GetCurrentTimestamp() - start, 1);
	b->part = (int) Max(1, Min((int64) count * TSDG_BATCH_SLICE_US / elapsed_us,
							   (int64) count * TSDG_BATCH_PART_GROWTH));
	return false;
}

/* One part of each running batch, in turn. */
void
TsdgContinueSearchBatches(void)
{
	int			i = 0;

	while (i < running_count)
		if (!SearchNextPart(i))
			i++;
}

/* Fails every running batch (the server shuts down): their sessions search on the CPU. */
void
TsdgFailSearchBatches(const char *why)
{
	while (running_count > 0)
		FinishBatch(running_count - 1, TSDG_REPLY_FAILED, why);
}
