/*
 * One search handed to the GPU worker (runs in the session that scans): the
 * query goes inline in the request slot, the results come back in it; the
 * worker's copy of the pending rows is brought up to date first, so that it
 * searches them with the graph. A batch (tsdgoffloadbatch.c) is sent, and
 * its replies handled, by the same function.
 */
#include "postgres.h"

#include "storage/dsm.h"
#include "utils/rel.h"

#include "tsdgoffload.h"

/*
 * Ends a session's wait for a query (or for the pending rows it is about to
 * search) that the worker has not taken while it loads, builds or merges an
 * index: that holds the worker for seconds, the query takes the session far
 * less on the CPU, and waiting out tsdg.worker_timeout_ms would cost every
 * search of that time (the first ones after a CREATE INDEX, typically).
 */
static bool
TsdgBusyWorkerPoll(void *arg, TsdgRequestSlot *slot)
{
	TsdgSlotState state;

	SpinLockAcquire(&slot->mutex);
	state = slot->state;
	SpinLockRelease(&slot->mutex);
	return state == TSDG_SLOT_QUEUED && TsdgIpcServerState() == TSDG_SERVER_BUSY;
}

/* Handles a reply other than OK; true when the request should be sent again. */
static bool
TsdgHandleReply(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key,
				TsdgRequestSlot *slot, bool answered, bool may_retry)
{
	TsdgReply	reply = answered ? slot->reply : TSDG_REPLY_FAILED;
	char		message[TSDG_ERROR_MESSAGE_LEN];

	strlcpy(message, slot->message, sizeof(message));
	TsdgIpcFinish(slot);
	if (!answered)
	{
		TsdgServerState state = TsdgIpcServerState();

		if (state == TSDG_SERVER_BUSY)
			TsdgCountFallback();
		else if (state == TSDG_SERVER_READY)
		{
			char		detail[128];

			snprintf(detail, sizeof(detail), "no answer within tsdg.worker_timeout_ms (%d ms)",
					 tsdg_worker_timeout_ms);
			TsdgLogFallback(TSDG_FALLBACK_TIMEOUT, "the GPU worker is slow, searching", detail);
		}
		else
			TsdgLogFallback(TSDG_FALLBACK_WORKER_GONE, "the GPU worker stopped, searching",
							"it is restarted by its supervisor");
		return false;
	}
	switch (reply)
	{
		case TSDG_REPLY_NEED_INDEX:
			return may_retry && TsdgShipIndex(index, meta, key);
		case TSDG_REPLY_NOT_RESIDENT:
		case TSDG_REPLY_BUSY:
			TsdgCountFallback();
			return false;
		case TSDG_REPLY_OUT_OF_MEMORY:
			TsdgLogFallback(TSDG_FALLBACK_OUT_OF_MEMORY, "GPU out of memory, searching", message);
			return false;
		case TSDG_REPLY_CANCELLED:
		case TSDG_REPLY_FAILED:
			TsdgLogFallback(TSDG_FALLBACK_FAILED, "the GPU worker failed, searching", message);
			return false;
		case TSDG_REPLY_OK:
			break;
	}
	return false;
}

/*
 * A segment for pending rows could not be made in this session (a small
 * /dev/shm): its searches scan them themselves rather than warn each time.
 */
static bool pending_segment_failed = false;

/*
 * Sends the worker the pending rows of meta's list from first on, for its
 * copy (TsdgPendingArgs): from the list's head, or after the first skip rows
 * of block from when first is where the worker's copy ends. Rows read while
 * a VACUUM began to move them are not sent.
 */
static void
TsdgSendPendingRows(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key,
					int64 first, BlockNumber from, int skip)
{
	TsdgLayout	layout;
	TsdgBulkHeader header;
	Size		offset = sizeof(TsdgBulkHeader);
	int64		wanted = meta->pending_count - first;
	int64		copied;
	BlockNumber end_block = InvalidBlockNumber;
	int			end_offset = 0;
	TsdgMetaPageData after;
	dsm_segment *seg;
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		answered;

	TsdgLayoutFromMeta(&layout, meta);
	memset(&header, 0, sizeof(header));
	header.rows = TsdgBulkAdd(&offset, sizeof(float) * meta->dims * wanted);
	header.tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * wanted);
	header.total_size = offset;
	seg = TsdgCreateBulkSegment(header.total_size, "the pending rows the GPU worker searches");
	if (seg == NULL)
	{
		pending_segment_failed = true;
		return;
	}
	memcpy(dsm_segment_address(seg), &header, sizeof(header));
	copied = TsdgCopyPendingRowsFrom(index, &layout, from, skip, wanted,
									 TsdgBulkArray(dsm_segment_address(seg), header.rows),
									 TsdgBulkArray(dsm_segment_address(seg), header.tids),
									 &end_block, &end_offset);

	/* a VACUUM that began meanwhile may have moved rows: that copy is of no epoch */
	TsdgReadMeta(index, &after);
	if (after.pending_epoch != meta->pending_epoch || copied < wanted)
	{
		dsm_detach(seg);
		return;
	}

	slot = TsdgIpcBeginRequest(TSDG_REQUEST_PENDING_ROWS);
	slot->args.pending.key = *key;
	slot->args.pending.pending_epoch = meta->pending_epoch;
	slot->args.pending.first = first;
	slot->args.pending.n = wanted;
	slot->args.pending.dims = meta->dims;
	slot->args.pending.end_block = end_block;
	slot->args.pending.end_offset = end_offset;
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	request_id = TsdgIpcSubmit(slot);
	answered = TsdgIpcWait(slot, request_id, tsdg_worker_timeout_ms, TsdgBusyWorkerPoll, NULL);
	/* busy building or merging, or the index dropped meanwhile: the session scans them this time */
	if (answered && slot->reply != TSDG_REPLY_OK && slot->reply != TSDG_REPLY_NOT_RESIDENT &&
		slot->reply != TSDG_REPLY_BUSY)
		TsdgLogFallback(slot->reply == TSDG_REPLY_OUT_OF_MEMORY ?
						TSDG_FALLBACK_OUT_OF_MEMORY : TSDG_FALLBACK_FAILED,
						"the GPU worker could not take the pending rows, scanning them",
						slot->message);
	TsdgIpcFinish(slot);
	dsm_detach(seg);
}

/*
 * How many pending rows a search should ask the worker to search with the
 * graph: all of meta's, after sending the worker those its copy lacks; 0
 * when the session scans them itself (few rows, a VACUUM moving them, the
 * index not resident yet, or a copy of a newer epoch than this metapage's).
 */
static int64
TsdgPendingForWorker(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key)
{
	int64		have = -1;
	uint64		epoch = 0;
	BlockNumber end_block = InvalidBlockNumber;
	int			end_offset = 0;

	if (tsdg_worker_pending_rows < 0 || pending_segment_failed || meta->pending_count == 0 ||
		meta->pending_count < tsdg_worker_pending_rows || meta->pending_epoch % 2 != 0)
		return 0;
	SpinLockAcquire(&TsdgShared->mutex);
	for (int i = 0; i < TsdgShared->resident_count; i++)
		if (TsdgIndexKeysEqual(&TsdgShared->resident[i].key, key))
		{
			have = TsdgShared->resident[i].pending_rows;
			epoch = TsdgShared->resident[i].pending_epoch;
			end_block = TsdgShared->resident[i].pending_end_block;
			end_offset = TsdgShared->resident[i].pending_end_offset;
			break;
		}
	SpinLockRelease(&TsdgShared->mutex);
	if (have < 0 || epoch > meta->pending_epoch)
		return 0;
	if (epoch < meta->pending_epoch || have == 0 || !BlockNumberIsValid(end_block))
	{
		have = 0;
		end_block = meta->pending_head;
		end_offset = 0;
	}
	if (have < meta->pending_count)
		TsdgSendPendingRows(index, meta, key, have, end_block, end_offset);
	return meta->pending_count;
}

/*
 * Sends a search to the worker and waits for its answer; a worker that lacks
 * the index is sent it, and the search once more. Returns the slot of an OK
 * answer, for the caller to read and finish (TsdgIpcFinish); NULL where the
 * session searches on the CPU instead.
 */
TsdgRequestSlot *
TsdgSendSearch(Relation index, const TsdgMetaPageData *meta, const TsdgSearchRequest *request,
			   TimestampTz *submitted_at)
{
	TsdgIndexKey key;

	TsdgIndexKeyOf(index, meta, &key);
	for (int attempt = 0; attempt < 2; attempt++)
	{
		int64		pending_rows = TsdgPendingForWorker(index, meta, &key);
		TsdgRequestSlot *slot = TsdgIpcBeginRequest(request->kind);
		TsdgSearchArgs *args = &slot->args.search;
		uint64		request_id;
		bool		answered;

		args->key = key;
		args->dims = meta->dims;
		args->k = request->k;
		args->ef = request->ef;
		args->lambda_limit = request->lambda_limit;
		args->nq = request->nq;
		args->pending_rows = pending_rows;
		args->pending_epoch = meta->pending_epoch;
		request->fill(slot, request->arg);
		*submitted_at = GetCurrentTimestamp();
		request_id = TsdgIpcSubmit(slot);
		answered = request->until_answered ?
			TsdgIpcWait(slot, request_id, -1, NULL, NULL) :
			TsdgIpcWait(slot, request_id, tsdg_worker_timeout_ms, TsdgBusyWorkerPoll, NULL);
		if (request->waited != NULL)
			request->waited(answered, request->arg);

		if (answered && slot->reply == TSDG_REPLY_OK)
			return slot;
		if (!TsdgHandleReply(index, meta, &key, slot, answered, attempt == 0))
			return NULL;
	}
	return NULL;
}

static void
TsdgFillSearchQuery(TsdgRequestSlot *slot, void *arg)
{
	memcpy(TsdgSlotQuery(slot), arg, sizeof(float) * slot->args.search.dims);
}

bool
TsdgWorkerSearch(Relation index, const TsdgMetaPageData *meta, const float *query,
				 int max_results, int ef, int lambda_limit, TsdgWorkerResults *results)
{
	const TsdgSearchRequest request = {
		.kind = TSDG_REQUEST_SEARCH,
		.k = max_results,
		.ef = ef,
		.lambda_limit = lambda_limit,
		.nq = 1,
		.until_answered = false,
		.fill = TsdgFillSearchQuery,
		.arg = unconstify(float *, query),
	};
	TsdgRequestSlot *slot;
	TimestampTz submitted_at;

	if (meta->dims > TSDG_SLOT_MAX_DIMS || max_results > TSDG_SLOT_MAX_RESULTS ||
		meta->node_count == 0 || !TsdgWorkerTakesRequest() ||
		!TsdgWorkerComputes((TsdgMetric) meta->metric, true) ||
		!TsdgWorkerTakesWidth(ef, max_results, false))
		return false;
	slot = TsdgSendSearch(index, meta, &request, &submitted_at);
	if (slot == NULL)
		return false;

	results->count = slot->result_count;
	memcpy(results->dists, TsdgSlotResultDists(slot), sizeof(float) * results->count);
	memcpy(results->ids, TsdgSlotResultIds(slot, max_results), sizeof(uint32) * results->count);
	memcpy(results->tids, TsdgSlotResultTids(slot, max_results),
		   sizeof(ItemPointerData) * results->count);
	results->pending_searched = slot->pending_searched;
	results->pending_bound = slot->pending_bound;
	/* where a query's round trip goes: log_min_messages = debug1 to see it */
	ereport(DEBUG1,
			(errmsg_internal("tsdg worker search: %lld us to the worker, %lld us on it, %lld us back",
							 (long long) (slot->taken_at - submitted_at),
							 (long long) (slot->answered_at - slot->taken_at),
							 (long long) (GetCurrentTimestamp() - slot->answered_at))));
	TsdgIpcFinish(slot);
	return true;
}
