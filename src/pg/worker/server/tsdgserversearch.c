/*
 * The GPU server's index scan searches (runs in the GPU server process): the
 * queries of a batch grouped by index and settings, one search call per
 * group, with the unreached rows and the pending rows' copy scored exactly
 * and merged into the results. The SQL batch searches are in
 * tsdgserverbatch.c.
 */
#include "postgres.h"

#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "tsdggpuserver.h"

TsdgStatus
TsdgSearchUnreached(const ResidentIndex *r, const float *queries, int nq, int uk,
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
		status = TsdgSearchUnreached(r, queries, nq, uk, &positions, &device_dists, error);
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

/* ---- searches ---- */

/*
 * The pending rows an index scan's round gets at most: the nearest of them,
 * with the distance past which the scan reads the rest itself
 * (TsdgTakeOverPending). A LIMIT up to this never does; a smaller k makes the
 * brute force's top-k selection cheaper.
 */
#define TSDG_PENDING_ROUND_ROWS	32

bool
TsdgPendingCopyCovers(const ResidentIndex *r, const TsdgSearchArgs *args)
{
	return args->pending_rows > 0 && args->k <= TSDG_EXACT_SET_MAX_K && r->pending != NULL &&
		args->pending_epoch == r->pending_epoch &&
		tsdg_exact_set_size(r->pending) >= args->pending_rows;
}

int
TsdgMergePendingResults(const ResidentIndex *r, int k, int graph_count, const float *graph_dists,
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
			if (TsdgPendingCopyCovers(r, &taken[members[m]].copy.args.search))
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
				TsdgPendingCopyCovers(r, &t->copy.args.search);
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

				count = TsdgMergePendingResults(r, k, count, dists + (Size) m * k, qids, tids,
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
