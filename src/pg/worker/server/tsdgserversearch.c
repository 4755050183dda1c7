/*
 * The GPU server's searches (runs in the GPU server process): the queries of
 * a batch grouped by index and settings, one search call per group, with the
 * unreached rows and the pending rows' copy scored exactly and merged into
 * the results; and the SQL batch searches, answered as heap TIDs in the
 * batch area or a segment of their own.
 */
#include "postgres.h"

#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/* batches of SQL batch searches this large get a LOG line with their time */
#define TSDG_LOGGED_BATCH		1000

/*
 * The nq queries' exact nearest unreached rows of r (uk each, positions into
 * r->unreached) into *positions and *dists, which it pallocs.
 */
static TsdgStatus
SearchUnreached(const ResidentIndex *r, const float *queries, int nq, int uk,
				uint32 **positions, float **dists, TsdgError *error)
{
	*positions = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * uk * (Size) nq);
	*dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * uk * (Size) nq);
	return tsdg_exact_set_search(r->unreached_set, queries, nq, uk, *positions, *dists, error);
}

/*
 * Up to this many distances (queries times unreached rows) the worker scores
 * the unreached rows on its own thread: for a few hundred rows and a few
 * queries, the device's exact set costs more in its launch and top-k
 * selection than the distances do.
 */
#define TSDG_HOST_UNREACHED_WORK	2048

/*
 * One query's unreached rows of r nearer than bound (its k-th graph
 * result), at most k of them, ascending, scored on this thread into hit_ids
 * and hit_dists; returns how many. scratch: r->unreached_count entries.
 */
static int
NearUnreachedOnHost(const ResidentIndex *r, const float *query, int k, float bound,
					uint32 *hit_ids, float *hit_dists, TsdgCandidate *scratch)
{
	int			near = 0;

	for (int64 i = 0; i < r->unreached_count; i++)
	{
		uint32		node = r->unreached[i];
		float		d = tsdg_metric_distance(r->metric, query, r->rows + (Size) node * r->dims,
											 r->dims);

		if (d < bound)
		{
			scratch[near].distance = d;
			scratch[near++].id = node;
		}
	}
	qsort(scratch, near, sizeof(TsdgCandidate), TsdgCompareCandidates);
	near = Min(near, k);
	for (int i = 0; i < near; i++)
	{
		hit_ids[i] = scratch[i].id;
		hit_dists[i] = scratch[i].distance;
	}
	return near;
}

/*
 * r's unreached rows merged into nq queries' k graph results (node ids), a
 * node once: on this thread for a few queries, else by the device's exact set.
 */
static TsdgStatus
MergeUnreachedIds(const ResidentIndex *r, const float *queries, int nq, int k, uint32 *ids,
				  float *dists, TsdgError *error)
{
	int			uk = (int) Min(k, r->unreached_count);
	bool		on_host = (int64) nq * r->unreached_count <= TSDG_HOST_UNREACHED_WORK;
	uint32	   *positions = NULL;
	float	   *device_dists = NULL;
	uint32	   *hit_ids;
	float	   *hit_dists;
	TsdgCandidate *scratch = NULL;
	uint32	   *scratch_ids;
	float	   *scratch_dists;
	uint32		missing = TSDG_INVALID_ID;
	TsdgStatus	status = TSDG_OK;

	if (uk == 0 || nq == 0)
		return TSDG_OK;
	if (on_host)
		scratch = palloc(sizeof(TsdgCandidate) * r->unreached_count);
	else
		status = SearchUnreached(r, queries, nq, uk, &positions, &device_dists, error);
	hit_ids = palloc(sizeof(uint32) * uk);
	hit_dists = palloc(sizeof(float) * uk);
	scratch_ids = palloc(sizeof(uint32) * k);
	scratch_dists = palloc(sizeof(float) * k);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		uint32	   *qids = ids + (Size) q * k;
		float	   *qdists = dists + (Size) q * k;
		int			hits = uk;

		if (on_host)
			hits = NearUnreachedOnHost(r, queries + (Size) q * r->dims, uk, qdists[k - 1],
									   hit_ids, hit_dists, scratch);
		else
			for (int j = 0; j < uk; j++)
			{
				uint32		position = positions[(Size) q * uk + j];

				hit_ids[j] = position == TSDG_INVALID_ID ? TSDG_INVALID_ID : r->unreached[position];
				hit_dists[j] = device_dists[(Size) q * uk + j];
			}
		TsdgMergeExactHits(k, qids, qdists, sizeof(uint32), &missing, hit_ids, hit_dists, hits,
						   scratch_ids, scratch_dists);
	}
	if (positions != NULL)
	{
		pfree(positions);
		pfree(device_dists);
	}
	if (scratch != NULL)
		pfree(scratch);
	pfree(hit_ids);
	pfree(hit_dists);
	pfree(scratch_ids);
	pfree(scratch_dists);
	return status;
}

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
	status = SearchUnreached(r, queries, nq, uk, &positions, &hit_dists, error);
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

/* ---- searches ---- */

/*
 * The pending rows an index scan's round gets at most: the nearest of them,
 * with the distance past which the scan reads the rest itself
 * (TsdgTakeOverPending). A LIMIT up to this never does; a smaller k makes the
 * brute force's top-k selection cheaper.
 */
#define TSDG_PENDING_ROUND_ROWS	32

/* true when the worker's copy of r's pending rows is the one args's metapage has, or more */
static bool
PendingCopyCovers(const ResidentIndex *r, const TsdgSearchArgs *args)
{
	return args->pending_rows > 0 && args->k <= TSDG_EXACT_SET_MAX_K && r->pending != NULL &&
		args->pending_epoch == r->pending_epoch &&
		tsdg_exact_set_size(r->pending) >= args->pending_rows;
}

/*
 * The k nearest of one query's graph results (graph_count of them, with
 * their TIDs; ids may be NULL) and of its pending_k nearest pending rows
 * (positions into r's copy, TSDG_INVALID_ID padded), into out_*; out_ids may
 * be NULL. Returns how many results were written.
 */
static int
MergePendingResults(const ResidentIndex *r, int k, int graph_count, const float *graph_dists,
					const uint32 *graph_ids, const ItemPointerData *graph_tids, int pending_k,
					const uint32 *pending_pos, const float *pending_dists,
					float *out_dists, uint32 *out_ids, ItemPointerData *out_tids)
{
	int			g = 0,
				p = 0,
				out = 0;

	while (out < k)
	{
		bool		pending_left = p < pending_k && pending_pos[p] != TSDG_INVALID_ID;

		if (pending_left && (g >= graph_count || pending_dists[p] < graph_dists[g]))
		{
			out_dists[out] = pending_dists[p];
			if (out_ids != NULL)
				out_ids[out] = TSDG_PENDING_ROW_ID;
			out_tids[out] = r->pending_tids[pending_pos[p]];
			p++;
		}
		else if (g < graph_count)
		{
			out_dists[out] = graph_dists[g];
			if (out_ids != NULL)
				out_ids[out] = graph_ids[g];
			out_tids[out] = graph_tids[g];
			g++;
		}
		else
			break;
		out++;
	}
	return out;
}

/*
 * Answers every search in taken[] that shares the first one's index and
 * settings with one search call, and one search of the pending rows for
 * those whose metapage has no pending row the worker lacks.
 */
void
TsdgServeSearchGroup(TakenRequest *taken, int ntaken, int first)
{
	const TsdgSearchArgs *args = &taken[first].copy.args.search;
	int		   *members = palloc(sizeof(int) * ntaken);
	int			nq = 0;
	ResidentIndex *r = TsdgFindResident(&args->key);
	int			k = Min(args->k, TSDG_SLOT_MAX_RESULTS);

	for (int i = first; i < ntaken; i++)
	{
		const TsdgSearchArgs *other = &taken[i].copy.args.search;

		if (taken[i].done || taken[i].copy.kind != TSDG_REQUEST_SEARCH ||
			!TsdgIndexKeysEqual(&other->key, &args->key) || other->k != args->k ||
			other->ef != args->ef || other->lambda_limit != args->lambda_limit ||
			other->dims != args->dims)
			continue;
		members[nq++] = i;
		taken[i].done = true;
	}

	if (r == NULL || r->dims != args->dims)
	{
		/* the first asker ships the index; the others search on the CPU meanwhile */
		bool		promised = r == NULL && TsdgPromiseLoad(&args->key);

		for (int m = 0; m < nq; m++)
		{
			TakenRequest *t = &taken[members[m]];

			TsdgIpcAnswer(t->slot, t->copy.request_id,
						  m == 0 && promised ? TSDG_REPLY_NEED_INDEX : TSDG_REPLY_NOT_RESIDENT, NULL);
		}
	}
	else
	{
		float	   *queries = palloc(sizeof(float) * args->dims * nq);
		uint32	   *ids = palloc(sizeof(uint32) * k * nq);
		float	   *dists = palloc(sizeof(float) * k * nq);
		ItemPointerData *tids = palloc(sizeof(ItemPointerData) * k);
		uint32	   *pending_pos = NULL;
		float	   *pending_dists = NULL;
		uint32	   *out_ids = palloc(sizeof(uint32) * k);
		float	   *out_dists = palloc(sizeof(float) * k);
		ItemPointerData *out_tids = palloc(sizeof(ItemPointerData) * k);
		int			pending_k = Min(k, TSDG_PENDING_ROUND_ROWS);
		TsdgError	error;
		TsdgStatus	status;

		for (int m = 0; m < nq; m++)
			memcpy(queries + (Size) m * args->dims, taken[members[m]].query,
				   sizeof(float) * args->dims);
		TsdgDropOlderGraphs(r);
		r->last_used = GetCurrentTimestamp();
		status = tsdg_index_search(r->index, queries, nq, k, Max(args->ef, k),
								   args->lambda_limit, ids, dists, &error);
		if (status == TSDG_OK)
			status = MergeUnreachedIds(r, queries, nq, k, ids, dists, &error);
		for (int m = 0; m < nq && status == TSDG_OK; m++)
			if (PendingCopyCovers(r, &taken[members[m]].copy.args.search))
			{
				pending_pos = palloc(sizeof(uint32) * pending_k * nq);
				pending_dists = palloc(sizeof(float) * pending_k * nq);
				status = tsdg_exact_set_search(r->pending, queries, nq, pending_k, pending_pos,
											   pending_dists, &error);
				break;
			}
		for (int m = 0; m < nq; m++)
		{
			TakenRequest *t = &taken[members[m]];
			const uint32 *qids = ids + (Size) m * k;
			bool		with_pending = status == TSDG_OK && pending_pos != NULL &&
				PendingCopyCovers(r, &t->copy.args.search);
			int			count = 0;

			if (status == TSDG_OK)
				while (count < k && qids[count] != TSDG_INVALID_ID && qids[count] < r->n)
				{
					tids[count] = r->tids[qids[count]];
					if (r->flags != NULL && (r->flags[qids[count]] & TSDG_NODE_DELETED) != 0)
						ItemPointerSetInvalid(&tids[count]);
					count++;
				}
			if (with_pending)
			{
				const uint32 *qpos = pending_pos + (Size) m * pending_k;
				const float *qdists = pending_dists + (Size) m * pending_k;
				/* a full list may leave out rows as near as its last */
				float		bound = qpos[pending_k - 1] != TSDG_INVALID_ID ?
					qdists[pending_k - 1] : get_float4_infinity();
				TsdgSearchAnswer answer;

				count = MergePendingResults(r, k, count, dists + (Size) m * k, qids, tids,
											pending_k, qpos, qdists, out_dists, out_ids, out_tids);
				answer = (TsdgSearchAnswer) {count, out_dists, out_ids, out_tids, k, true, bound};
				TsdgIpcAnswerSearch(t->slot, t->copy.request_id, TSDG_REPLY_OK, &answer, NULL);
			}
			else
			{
				TsdgSearchAnswer answer = {count, dists + (Size) m * k, qids, tids, k, false,
				get_float4_infinity()};

				TsdgIpcAnswerSearch(t->slot, t->copy.request_id, TsdgReplyOf(status), &answer,
									status == TSDG_OK ? NULL : error.message);
			}
		}
		pg_atomic_fetch_add_u64(&TsdgShared->batches, 1);
		pg_atomic_fetch_add_u64(&TsdgShared->batched_queries, nq);
		pfree(queries);
		pfree(ids);
		pfree(dists);
		pfree(tids);
		pfree(out_ids);
		pfree(out_dists);
		pfree(out_tids);
		if (pending_pos != NULL)
		{
			pfree(pending_pos);
			pfree(pending_dists);
		}
	}
	pfree(members);
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
		count = MergePendingResults(r, k, graph_count, qdists, NULL, qtids, k,
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

/* before the answer: the session may give the batch area to another once it has it */
static void
LetGoOfBatchArea(const TakenRequest *t)
{
	if (t->copy.in_batch_area)
		TsdgIpcLetGoOfBatchArea();
}

/*
 * A batch of queries in the batch area or a DSM segment, answered as heap
 * TIDs: the session does not read a page per result. Deleted nodes are
 * skipped, so the search asks for as many more results as the index has
 * deleted nodes, up to k more.
 */
void
TsdgServeSearchBatch(TakenRequest *t)
{
	const TsdgSearchArgs *args = &t->copy.args.search;
	ResidentIndex *r = TsdgFindResident(&args->key);
	BulkMapping map;
	TsdgBulkHeader *header;
	TsdgError	error;
	TsdgStatus	status;
	TimestampTz start;
	int			k = args->k;
	int			wide_k;
	bool		pending_searched;
	TsdgSearchAnswer answer = {0};

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
	if (args->nq < 1 || k < 1 ||
		!TsdgBulkFits(&map, header->queries, sizeof(float) * args->dims * (Size) args->nq) ||
		!TsdgBulkFits(&map, header->tids, sizeof(ItemPointerData) * k * (Size) args->nq) ||
		!TsdgBulkFits(&map, header->dists, sizeof(float) * k * (Size) args->nq))
	{
		TsdgUnmapBulk(&map);
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the batch's sizes do not fit its shared memory segment");
		return;
	}
	wide_k = r->flags != NULL ? k + Min(k, (int) args->key.deleted_count) : k;
	r->last_used = start = GetCurrentTimestamp();
	status = tsdg_index_search_payload(r->index, TsdgBulkArray(map.address, header->queries),
									   args->nq, wide_k, k, Max(args->ef, wide_k), args->lambda_limit,
									   TsdgBulkArray(map.address, header->tids),
									   TsdgBulkArray(map.address, header->dists), &error);
	if (status == TSDG_OK)
		status = MergeUnreachedTids(r, TsdgBulkArray(map.address, header->queries), args->nq, k,
									TsdgBulkArray(map.address, header->tids),
									TsdgBulkArray(map.address, header->dists), &error);
	pending_searched = status == TSDG_OK && PendingCopyCovers(r, args);
	if (pending_searched)
		status = MergePendingIntoBatch(r, TsdgBulkArray(map.address, header->queries), args->nq, k,
									   TsdgBulkArray(map.address, header->tids),
									   TsdgBulkArray(map.address, header->dists), &error);
	if (status == TSDG_OK)
	{
		pg_atomic_fetch_add_u64(&TsdgShared->batches, 1);
		pg_atomic_fetch_add_u64(&TsdgShared->batched_queries, args->nq);
		if (args->nq >= TSDG_LOGGED_BATCH)
			ereport(LOG,
					(errmsg("pg_tsdg GPU worker: searched a batch of %d queries (k %d, ef %d) in %.3f ms",
							args->nq, wide_k, Max(args->ef, wide_k), TsdgSecondsSince(start) * 1000)));
	}
	TsdgUnmapBulk(&map);
	LetGoOfBatchArea(t);
	answer.result_count = status == TSDG_OK ? args->nq : 0;
	answer.pending_searched = pending_searched && status == TSDG_OK;
	answer.pending_bound = get_float4_infinity();
	TsdgIpcAnswerSearch(t->slot, t->copy.request_id, TsdgReplyOf(status), &answer,
						status == TSDG_OK ? NULL : error.message);
}
