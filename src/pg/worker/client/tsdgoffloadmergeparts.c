/*
 * A merge handed to the GPU worker in parts (runs in the session that
 * merges). Where a segment of the whole merge would pass
 * maintenance_work_mem, the merge keeps its arrays as a merge on the CPU
 * does (in temporary files past maintenance_work_mem) and sends its inputs
 * through a segment of at most maintenance_work_mem, a part at a time, with
 * the turns of a build in parts (tsdgparts.h); the merged graph comes back
 * the same way. What the worker's copy of the old graph holds (its rows, its
 * lists) does not travel. The worker computes the merged graph's summary and
 * navigating layer, and repairs its graph for the rows its searches do not reach, before it
 * sends the graph back: the lists come back as its copy keeps them, and the
 * session waits for nothing after the answer.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/dsm.h"
#include "utils/rel.h"

#include "tsdgoffload.h"

/* what a merge's segment of parts has room for besides the merged graph */
typedef struct TsdgMergePartsContents
{
	int64		rows_from;		/* the first row sent: n_old when the worker has the old ones */
	bool		old_lists;		/* the old k-NN and search lists: the worker lacks them */
	bool		old_knn_dists;
	bool		old_changed;
	bool		merged_knn;		/* false: the caller keeps its k-NN pages, the worker the lists */
	bool		summary;		/* and the navigating layer of the merge's n rows */
	int64		n;
	int			degree;
} TsdgMergePartsContents;

/* a merge's segment of parts of capacity rows (see TsdgBulkHeader) */
static void
TsdgMergePartsLayout(TsdgBulkHeader *header, int64 capacity, int dims,
					 const TsdgBuildParams *params, const TsdgMergePartsContents *contents)
{
	Size		offset = sizeof(TsdgBulkHeader);
	Size		rows = (Size) capacity;

	memset(header, 0, sizeof(TsdgBulkHeader));
	header->capacity = capacity;
	header->rows_from = contents->rows_from;
	if (contents->summary)
		header->summary = TsdgBulkAdd(&offset, sizeof(TsdgBuildSummary));
	header->parts = TsdgBulkAdd(&offset, sizeof(TsdgPartTurns));
	header->rows = TsdgBulkAdd(&offset, sizeof(float) * dims * rows);
	header->tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * rows);
	if (contents->old_lists)
	{
		header->knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * rows);
		header->neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * rows);
		header->lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * rows);
	}
	if (contents->old_knn_dists)
		header->dists = TsdgBulkAdd(&offset, sizeof(float) * params->build_k * rows);
	if (contents->old_changed)
		header->flags = TsdgBulkAdd(&offset, sizeof(uint8) * rows);
	if (contents->merged_knn)
		header->merged_knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * rows);
	header->merged_neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * rows);
	header->merged_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * rows);
	header->changed = TsdgBulkAdd(&offset, sizeof(uint8) * rows);
	if (contents->summary && tsdg_layer_node_count(contents->n) > 0)
	{
		Size		layer_lists = (Size) tsdg_layer_node_count(contents->n) * contents->degree;

		header->layer_ids = TsdgBulkAdd(&offset, sizeof(uint32) * layer_lists);
		header->layer_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * layer_lists);
	}
	header->total_size = offset;
}

/* the most rows a part may have within max_bytes, at least one */
static int64
TsdgMergePartCapacity(Size max_bytes, int dims, const TsdgBuildParams *params,
					  const TsdgMergePartsContents *contents)
{
	TsdgBulkHeader header;
	Size		fixed;
	Size		row;
	int64		capacity = 1;

	TsdgMergePartsLayout(&header, 0, dims, params, contents);
	fixed = header.total_size;
	TsdgMergePartsLayout(&header, 1024, dims, params, contents);
	row = (header.total_size - fixed) / 1024 + 1;
	if (max_bytes > fixed)
		capacity = Max((int64) ((max_bytes - fixed) / row), 1);
	/* the arrays' alignment: never past max_bytes but for a single row */
	for (;;)
	{
		TsdgMergePartsLayout(&header, capacity, dims, params, contents);
		if (capacity == 1 || header.total_size <= max_bytes)
			return capacity;
		capacity--;
	}
}

typedef struct TsdgMergePartsWait
{
	TsdgPartTurns *turns;
	void	   *base;
	TsdgPartStream in;
	TsdgPartStream out;
} TsdgMergePartsWait;

/* the session's turns, as the worker's wake-ups make them due */
static bool
TsdgMergePartsPoll(void *arg, TsdgRequestSlot *slot)
{
	TsdgMergePartsWait *wait = (TsdgMergePartsWait *) arg;

	(void) TsdgTakePartTurns(wait->turns, wait->base, &wait->in, &wait->out);
	return false;
}

TsdgWorkerMerge
TsdgWorkerMergeInParts(Relation index, TsdgMergeSegment *mseg, const TsdgMetaPageData *old_meta,
					   TsdgWorkerCopy left, const TsdgMetaPageData *new_meta,
					   const TsdgMergeData *data)
{
	TsdgMergePartsContents contents = {left != TSDG_COPY_NONE ? data->n_old : 0,
		left != TSDG_COPY_GRAPH, data->old_knn_dists != NULL, data->old_changed != NULL,
	data->knn_ids != NULL, mseg != NULL, data->n_old + data->n_new, data->params->degree};
	TsdgMergePartArrays arrays = {(float *) data->rows, (ItemPointerData *) data->tids,
		(uint32 *) data->old_knn_ids, (float *) data->old_knn_dists,
		(uint32 *) data->old_neighbors, (uint8 *) data->old_lambdas, (uint8 *) data->old_changed,
	data->knn_ids, data->neighbors, data->lambdas, data->changed};
	TsdgBulkHeader header;
	TsdgMergePartsWait wait;
	TsdgBuildSummary *summary = NULL;
	dsm_segment *seg;
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		answered;
	TsdgReply	reply;
	char		message[TSDG_ERROR_MESSAGE_LEN];
	TimestampTz submitted;
	int64		capacity;

	capacity = TsdgMergePartCapacity(TsdgMergeSegmentLimit(), data->dims, data->params, &contents);
	TsdgMergePartsLayout(&header, capacity, data->dims, data->params, &contents);
	seg = TsdgCreateBulkSegment(header.total_size, "a merge on the GPU worker in parts");
	if (seg == NULL)
	{
		TsdgCountFallback();
		return TSDG_WORKER_DECLINED;
	}
	wait.base = dsm_segment_address(seg);
	memcpy(wait.base, &header, sizeof(header));
	wait.turns = TsdgBulkArray(wait.base, header.parts);
	TsdgInitPartTurns(wait.turns);
	if (header.summary != 0)
	{
		summary = TsdgBulkArray(wait.base, header.summary);
		pg_atomic_init_u32(&summary->state, TSDG_SUMMARY_PENDING);
		pg_atomic_init_u32(&summary->knn_ready, 0);
		pg_atomic_init_u64(&summary->lists_ready, 0);
	}

	slot = TsdgBeginMergeRequest(index, old_meta, left, new_meta, data);
	slot->args.merge.in_parts = true;
	TsdgMergePartStreams(&header, &slot->args.merge, &arrays, &wait.in, &wait.out);
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	submitted = GetCurrentTimestamp();
	request_id = TsdgIpcSubmit(slot);
	/* a query cancel throws out of the wait (the segment goes with the transaction's resources) */
	answered = TsdgIpcWait(slot, request_id, -1, TsdgMergePartsPoll, &wait);
	reply = answered ? slot->reply : TSDG_REPLY_FAILED;
	strlcpy(message, answered ? slot->message : "It is restarted by its supervisor.",
			sizeof(message));
	TsdgIpcFinish(slot);
	if (reply != TSDG_REPLY_OK)
	{
		dsm_detach(seg);
		return TsdgMergeNotAnswered(index, answered, reply, left, message);
	}

	ereport(LOG,
			(errmsg("tsdg index \"%s\" merged on the GPU worker: " INT64_FORMAT " + " INT64_FORMAT " rows, %.3f s from the request to the answer",
					RelationGetRelationName(index), data->n_old, data->n_new,
					(double) (GetCurrentTimestamp() - submitted) / 1000000.0),
			 errdetail("Through a shared memory segment of %zu bytes within maintenance_work_mem, in parts of up to " INT64_FORMAT " rows: " INT64_FORMAT " parts in (%s), " INT64_FORMAT " parts out (%s).",
					   header.total_size, capacity, TsdgPartCount(&wait.in),
					   left == TSDG_COPY_GRAPH ? "the new rows; the old graph is the worker's copy" :
					   left == TSDG_COPY_ROWS ? "the new rows and the old lists; the old rows are the worker's copy" :
					   "the old graph and the new rows",
					   TsdgPartCount(&wait.out),
					   header.merged_knn_ids != 0 ? "the merged search and k-NN lists" :
					   "the merged search lists; the worker keeps the merged k-NN lists")));
	if (summary != NULL)
	{
		/* the summary came before the last part: it is kept with the segment until the merge ends */
		mseg->parts_seg = seg;
		mseg->summary = summary;
		mseg->layer_ids = TsdgBulkArray(wait.base, header.layer_ids);
		mseg->layer_lambdas = TsdgBulkArray(wait.base, header.layer_lambdas);
		mseg->summary_pid = TsdgServerPid();
	}
	else
		dsm_detach(seg);
	return TSDG_WORKER_MERGED;
}
