/*
 * A merge handed to the GPU worker (runs in the session that merges): the
 * segment the merge reads its rows and lists into, what the worker's copy of
 * the old graph spares the merge from reading, the request, and the hooks
 * that write pages while the worker computes.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "utils/rel.h"

#include "tsdgoffload.h"

bool
TsdgWorkerMergeSummary(TsdgMergeSegment *mseg, TsdgMetaPageData *meta)
{
	return mseg->summary_pid != 0 && TsdgWaitSummary(mseg->summary, mseg->summary_pid, meta);
}

bool
TsdgWorkerMergeLayer(TsdgMergeSegment *mseg, int64 n, uint32 **ids, uint8 **lambdas)
{
	return mseg->summary_pid != 0 &&
		TsdgSummaryLayer(mseg->summary, mseg->layer_ids, mseg->layer_lambdas, n, ids, lambdas);
}

/*
 * The layout of a merge segment (see TsdgBulkHeader): with_changed, the old
 * lists' repaired flags; with_summary, the summary and the navigating layer
 * the worker computes after its answer.
 */
static void
TsdgMergeLayout(TsdgBulkHeader *header, int64 n_old, int64 n_new, int dims,
				const TsdgBuildParams *params, const TsdgMergeSegmentContents *contents,
				bool with_changed, bool with_summary)
{
	Size		offset = sizeof(TsdgBulkHeader);
	Size		n = (Size) (n_old + n_new);
	bool		with_old_lists = contents->old_lists;
	bool		with_dists = contents->old_knn_dists;
	bool		with_old_rows = contents->old_rows;
	bool		with_merged_knn = contents->merged_knn;

	memset(header, 0, sizeof(TsdgBulkHeader));
	if (with_summary)
		header->summary = TsdgBulkAdd(&offset, sizeof(TsdgBuildSummary));
	header->rows_from = with_old_rows ? 0 : n_old;
	header->rows = TsdgBulkAdd(&offset, sizeof(float) * dims * (n - (Size) header->rows_from));
	header->tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * n);
	if (with_old_lists)
		header->knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * (Size) n_old);
	if (with_dists)
		header->dists = TsdgBulkAdd(&offset, sizeof(float) * params->build_k * (Size) n_old);
	if (with_old_lists)
	{
		header->neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * (Size) n_old);
		header->lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * (Size) n_old);
	}
	if (with_changed)
		header->flags = TsdgBulkAdd(&offset, sizeof(uint8) * (Size) n_old);
	if (with_merged_knn)
		header->merged_knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * n);
	header->merged_neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * n);
	header->merged_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * n);
	header->changed = TsdgBulkAdd(&offset, sizeof(uint8) * n);
	if (with_summary && tsdg_layer_node_count(n) > 0)
	{
		Size		layer_lists = (Size) tsdg_layer_node_count(n) * params->degree;

		header->layer_ids = TsdgBulkAdd(&offset, sizeof(uint32) * layer_lists);
		header->layer_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * layer_lists);
	}
	header->total_size = offset;
}

/*
 * copies bytes into the segment at offset (0: the array is absent), unless
 * src is already there
 */
static void
TsdgBulkCopyIn(void *base, Size offset, const void *src, Size bytes)
{
	if (offset != 0 && TsdgBulkArray(base, offset) != src)
		memcpy(TsdgBulkArray(base, offset), src, bytes);
}

/* copies bytes out of the segment at offset, unless dst is that array */
static void
TsdgBulkCopyOut(void *dst, void *base, Size offset, Size bytes)
{
	if (TsdgBulkArray(base, offset) != dst)
		memcpy(dst, TsdgBulkArray(base, offset), bytes);
}

bool
TsdgMergeSegmentCreate(TsdgMergeSegment *mseg, int64 old_capacity, int64 new_capacity, int dims,
					   const TsdgBuildParams *params, const TsdgMergeSegmentContents *contents)
{
	TsdgBulkHeader header;
	dsm_segment *seg;
	char	   *base;

	memset(mseg, 0, sizeof(TsdgMergeSegment));
	/* a busy worker is counted as a fallback once, by TsdgWorkerMergeGraph */
	if (old_capacity + new_capacity == 0 || !TsdgWorkerUsable())
		return false;
	TsdgMergeLayout(&header, old_capacity, new_capacity, dims, params, contents, true, true);
	if (header.total_size > TsdgMergeSegmentLimit())
	{
		mseg->in_parts = true;
		return false;
	}
	seg = TsdgCreateBulkSegment(header.total_size, "a merge on the GPU worker");
	if (seg == NULL)
		return false;
	base = dsm_segment_address(seg);
	memcpy(base, &header, sizeof(header));
	mseg->seg = seg;
	mseg->old_capacity = old_capacity;
	mseg->new_capacity = new_capacity;
	mseg->rows_from = header.rows_from;
	mseg->rows = TsdgBulkArray(base, header.rows);
	mseg->tids = TsdgBulkArray(base, header.tids);
	mseg->old_knn_ids = TsdgBulkArray(base, header.knn_ids);
	mseg->old_knn_dists = contents->old_knn_dists ? TsdgBulkArray(base, header.dists) : NULL;
	mseg->old_neighbors = TsdgBulkArray(base, header.neighbors);
	mseg->old_lambdas = TsdgBulkArray(base, header.lambdas);
	mseg->old_changed = TsdgBulkArray(base, header.flags);
	memset(mseg->old_changed, 0, (Size) old_capacity);
	mseg->knn_ids = TsdgBulkArray(base, header.merged_knn_ids);
	mseg->neighbors = TsdgBulkArray(base, header.merged_neighbors);
	mseg->lambdas = TsdgBulkArray(base, header.merged_lambdas);
	mseg->changed = TsdgBulkArray(base, header.changed);
	mseg->layer_ids = TsdgBulkArray(base, header.layer_ids);
	mseg->layer_lambdas = TsdgBulkArray(base, header.layer_lambdas);
	mseg->summary = TsdgBulkArray(base, header.summary);
	pg_atomic_init_u32(&mseg->summary->state, TSDG_SUMMARY_PENDING);
	pg_atomic_init_u32(&mseg->summary->knn_ready, 0);
	pg_atomic_init_u64(&mseg->summary->lists_ready, 0);
	return true;
}

void
TsdgMergeSegmentRelease(TsdgMergeSegment *mseg)
{
	if (mseg->seg != NULL)
		dsm_detach(mseg->seg);
	if (mseg->parts_seg != NULL)
		dsm_detach(mseg->parts_seg);
	memset(mseg, 0, sizeof(TsdgMergeSegment));
}

TsdgWorkerCopy
TsdgWorkerCopyOf(Relation index, const TsdgMetaPageData *meta)
{
	TsdgIndexKey key;
	TsdgWorkerCopy copy = TSDG_COPY_NONE;

	TsdgIndexKeyOf(index, meta, &key);
	SpinLockAcquire(&TsdgShared->mutex);
	for (int i = 0; i < TsdgShared->resident_count && copy == TSDG_COPY_NONE; i++)
		if (memcmp(&TsdgShared->resident[i].key, &key, sizeof(key)) == 0)
			copy = TsdgShared->resident[i].with_knn ? TSDG_COPY_GRAPH : TSDG_COPY_ROWS;
	SpinLockRelease(&TsdgShared->mutex);
	return copy;
}

/*
 * Runs the segment's while_merging once, its knn_ready once the worker has
 * put the merged k-NN lists in the segment, and its lists_ready each time
 * more search lists are there.
 */
static bool
TsdgMergeWaitPoll(void *arg, TsdgRequestSlot *slot)
{
	TsdgMergeSegment *mseg = (TsdgMergeSegment *) arg;

	TsdgRunHookOnce(&mseg->while_merging, mseg->hook_arg);
	TsdgRunReadyHooks(mseg->summary, &mseg->knn_ready, mseg->lists_ready, &mseg->lists_seen,
					  mseg->hook_arg);
	return false;
}

Size
TsdgMergeSegmentLimit(void)
{
	return (Size) maintenance_work_mem * 1024;
}

TsdgRequestSlot *
TsdgBeginMergeRequest(Relation index, const TsdgMetaPageData *old_meta, TsdgWorkerCopy left,
					  const TsdgMetaPageData *new_meta, const TsdgMergeData *data)
{
	TsdgRequestSlot *slot = TsdgIpcBeginRequest(TSDG_REQUEST_MERGE);

	memset(&slot->args.merge, 0, sizeof(TsdgMergeArgs));
	slot->args.merge.database = MyDatabaseId;
	slot->args.merge.relfilenode = index->rd_node.relNode;
	slot->args.merge.n_old = data->n_old;
	slot->args.merge.n_new = data->n_new;
	slot->args.merge.dims = data->dims;
	slot->args.merge.metric = data->metric;
	slot->args.merge.params = *data->params;
	TsdgIndexKeyOf(index, old_meta, &slot->args.merge.old_key);
	slot->args.merge.rows_resident = left != TSDG_COPY_NONE;
	slot->args.merge.graph_resident = left == TSDG_COPY_GRAPH;
	TsdgIndexKeyOf(index, new_meta, &slot->args.merge.new_key);
	TsdgSetUnreachedCheck(&slot->args.merge.check, new_meta);
	return slot;
}

TsdgWorkerMerge
TsdgMergeNotAnswered(Relation index, bool answered, TsdgReply reply, TsdgWorkerCopy left,
					 const char *message)
{
	if (reply == TSDG_REPLY_NOT_RESIDENT && left != TSDG_COPY_NONE)
		return TSDG_WORKER_NEEDS_OLD_GRAPH;
	/* CANCELLED too: this session's cancel throws out of the wait, so the worker was shut down */
	TsdgCountFallback();
	ereport(reply == TSDG_REPLY_OUT_OF_MEMORY ? WARNING : LOG,
			(errmsg("tsdg merge of index \"%s\" falls back to the CPU: %s",
					RelationGetRelationName(index),
					!answered ? "the GPU worker stopped during the merge" :
					reply == TSDG_REPLY_OUT_OF_MEMORY ? "the GPU worker is out of memory" :
					"the GPU worker could not merge the graph"),
			 errdetail("%s", message)));
	return TSDG_WORKER_DECLINED;
}

TsdgWorkerMerge
TsdgWorkerMergeGraph(Relation index, TsdgMergeSegment *mseg, const TsdgMetaPageData *old_meta,
					 TsdgWorkerCopy left, const TsdgMetaPageData *new_meta,
					 const TsdgMergeData *data)
{
	const ItemPointerData *tids = data->tids;
	const float *rows = data->rows;
	int64		n_old = data->n_old;
	int64		n_new = data->n_new;
	int			dims = data->dims;
	const TsdgBuildParams *params = data->params;
	const float *old_knn_dists = data->old_knn_dists;
	const uint8 *old_changed = data->old_changed;
	int64		n = n_old + n_new;
	int			k = params->build_k;
	int			degree = params->degree;
	TsdgBulkHeader header;
	dsm_segment *seg;
	char	   *base;
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		answered;
	TsdgReply	reply;
	char		message[TSDG_ERROR_MESSAGE_LEN];
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz submitted;
	TimestampTz answered_at;

	Assert(left == TSDG_COPY_NONE || (mseg != NULL && (mseg->seg != NULL || mseg->in_parts)));
	/* a segment made without the old lists or rows (the worker had them) cannot carry them now */
	if (mseg != NULL && mseg->seg != NULL && n_old > 0 &&
		((left != TSDG_COPY_GRAPH && mseg->old_knn_ids == NULL) ||
		 (left == TSDG_COPY_NONE && mseg->rows_from > 0)))
		mseg = NULL;
	if (n == 0 || (TsdgWorkerUsable() && !TsdgWorkerComputes(data->metric, false)))
		return TSDG_WORKER_DECLINED;
	if (!TsdgWorkerAwaitRequest())
	{
		/* unlike CREATE INDEX, not an error: VACUUM's merge would lose VACUUM's work */
		if (tsdg_device == TSDG_DEVICE_GPU)
			ereport(LOG,
					(errmsg("tsdg merge of index \"%s\" runs on the CPU: tsdg.device is \"gpu\" but no GPU worker is available",
							RelationGetRelationName(index))));
		return TSDG_WORKER_DECLINED;
	}

	if (mseg != NULL && mseg->seg != NULL)
	{
		/*
		 * The caller's arrays are the segment's. Old distances the caller
		 * does not have are left out (the worker computes them).
		 */
		seg = mseg->seg;
		base = dsm_segment_address(seg);
		memcpy(&header, base, sizeof(header));
		if (old_knn_dists == NULL)
			header.dists = 0;
		memcpy(base, &header, sizeof(header));
	}
	else
	{
		TsdgMergeSegmentContents everything = {true, true, old_knn_dists != NULL,
		data->knn_ids != NULL};

		TsdgMergeLayout(&header, n_old, n_new, dims, params, &everything, old_changed != NULL,
						false);
		/* past maintenance_work_mem, or from a merge that left the worker's copy to it there */
		if (left != TSDG_COPY_NONE || header.total_size > TsdgMergeSegmentLimit())
			return TsdgWorkerMergeInParts(index, mseg, old_meta, left, new_meta, data);
		seg = TsdgCreateBulkSegment(header.total_size, "a merge on the GPU worker");
		if (seg == NULL)
		{
			TsdgCountFallback();
			return TSDG_WORKER_DECLINED;
		}
		base = dsm_segment_address(seg);
		memcpy(base, &header, sizeof(header));
	}
	if (left == TSDG_COPY_NONE)
	{
		TsdgBulkCopyIn(base, header.rows, rows, sizeof(float) * dims * (Size) n);
		TsdgBulkCopyIn(base, header.tids, tids, sizeof(ItemPointerData) * (Size) n);
	}
	else
	{
		TsdgBulkCopyIn(base, header.rows + sizeof(float) * dims * (Size) (n_old - header.rows_from),
					   rows + dims * n_old, sizeof(float) * dims * (Size) n_new);
		TsdgBulkCopyIn(base, header.tids + sizeof(ItemPointerData) * (Size) n_old,
					   tids + n_old, sizeof(ItemPointerData) * (Size) n_new);
	}
	if (left != TSDG_COPY_GRAPH)
	{
		TsdgBulkCopyIn(base, header.knn_ids, data->old_knn_ids, sizeof(uint32) * k * (Size) n_old);
		TsdgBulkCopyIn(base, header.neighbors, data->old_neighbors,
					   sizeof(uint32) * degree * (Size) n_old);
		TsdgBulkCopyIn(base, header.lambdas, data->old_lambdas,
					   sizeof(uint8) * degree * (Size) n_old);
	}
	TsdgBulkCopyIn(base, header.dists, old_knn_dists, sizeof(float) * k * (Size) n_old);
	TsdgBulkCopyIn(base, header.flags, old_changed, sizeof(uint8) * (Size) n_old);

	slot = TsdgBeginMergeRequest(index, old_meta, left, new_meta, data);
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	submitted = GetCurrentTimestamp();
	request_id = TsdgIpcSubmit(slot);
	/* a query cancel throws out of the wait, and the worker stops at its next poll */
	answered = TsdgIpcWait(slot, request_id, -1,
						   mseg != NULL && seg == mseg->seg ? TsdgMergeWaitPoll : NULL, mseg);
	answered_at = GetCurrentTimestamp();
	reply = answered ? slot->reply : TSDG_REPLY_FAILED;
	strlcpy(message, answered ? slot->message : "It is restarted by its supervisor.",
			sizeof(message));
	TsdgIpcFinish(slot);

	if (reply != TSDG_REPLY_OK)
	{
		if (seg != (mseg != NULL ? mseg->seg : NULL))
			dsm_detach(seg);
		return TsdgMergeNotAnswered(index, answered, reply, left, message);
	}

	/*
	 * The hooks see the merge's end too: a worker that publishes no list
	 * before it answers (the CPU backend's merge links components as it
	 * diversifies) has published them all by now.
	 */
	if (mseg != NULL && seg == mseg->seg)
	{
		mseg->answered = true;
		(void) TsdgMergeWaitPoll(mseg, slot);
	}

	/* without them in the segment, the caller keeps its k-NN pages and needs none */
	if (header.merged_knn_ids != 0)
		TsdgBulkCopyOut(data->knn_ids, base, header.merged_knn_ids, sizeof(uint32) * k * (Size) n);
	TsdgBulkCopyOut(data->neighbors, base, header.merged_neighbors,
					sizeof(uint32) * degree * (Size) n);
	TsdgBulkCopyOut(data->lambdas, base, header.merged_lambdas, sizeof(uint8) * degree * (Size) n);
	TsdgBulkCopyOut(data->changed, base, header.changed, sizeof(uint8) * (Size) n);
	if (seg != (mseg != NULL ? mseg->seg : NULL))
		dsm_detach(seg);
	else if (header.summary != 0)
		mseg->summary_pid = TsdgServerPid();
	ereport(LOG,
			(errmsg("tsdg index \"%s\" merged on the GPU worker: " INT64_FORMAT " + " INT64_FORMAT " rows, %.3f s from the request to the answer",
					RelationGetRelationName(index), n_old, n_new,
					(double) (answered_at - submitted) / 1000000.0),
			 mseg != NULL && seg == mseg->seg ?
			 errdetail("Shared memory segment of %zu MB, read into by the merge and written from; the worker's own memory has the merged graph's %s.",
					   (header.total_size >> 20) + 1,
					   header.rows_from > 0 && header.merged_knn_ids == 0 ? "rows and k-NN lists" :
					   header.rows_from > 0 ? "rows" :
					   header.merged_knn_ids == 0 ? "k-NN lists" : "neither rows nor k-NN lists") :
			 errdetail("Shared memory segment of %zu MB made and filled in %.3f s, read back and released in %.3f s.",
					   (header.total_size >> 20) + 1, (double) (submitted - start) / 1000000.0,
					   (double) (GetCurrentTimestamp() - answered_at) / 1000000.0)));
	return TSDG_WORKER_MERGED;
}
