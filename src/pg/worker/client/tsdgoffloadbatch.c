/*
 * A batch of searches handed to the GPU worker (runs in the session that
 * calls a batch search function): the queries and answers lie in the shared
 * batch area when this session can take it, else in a segment of the
 * session's own, kept between batches.
 */
#include "postgres.h"

#include <sys/mman.h>
#include <unistd.h>

#include "storage/dsm.h"
#include "utils/timestamp.h"

#include "tsdgoffload.h"

/*
 * Where this session's batch is: the batch area of the main shared memory
 * when it could take it (batch_in_area), else this session's own segment for
 * batches, mapped for the session's life. batch_in_flight: a request on the
 * segment got no answer (abandoned, or an error while waiting), so the worker
 * may still read or write it: it is then given up rather than reused. (The
 * area has the same guard in shared memory: see TsdgBatchAreaState.)
 */
static bool batch_in_area = false;
static dsm_segment *batch_segment = NULL;
static Size batch_segment_size = 0;
static bool batch_in_flight = false;
/* the arrays of the batch now in the area or segment */
static TsdgBulkHeader batch_layout;

/* segments up to this size are kept between batches; larger ones are freed after the call */
#define TSDG_KEPT_BATCH_SEGMENT	((Size) 64 * 1024 * 1024)

static void
TsdgReleaseBatchSegment(void)
{
	if (batch_segment != NULL)
		dsm_detach(batch_segment);
	batch_segment = NULL;
	batch_in_flight = false;
}

/* this session's segment for batches, with room for needed bytes; false: none could be made */
static bool
TsdgAttachBatchSegment(Size needed)
{
	if (batch_segment != NULL &&
		(batch_in_flight || batch_segment_size < needed))
		TsdgReleaseBatchSegment();
	if (batch_segment == NULL)
	{
		/* room for a few more queries than asked, so that similar batches reuse it */
		Size		size = Max(needed + needed / 4, (Size) 1024 * 1024);

		batch_segment = TsdgCreateBulkSegment(size, "a batch of queries for the GPU worker");
		if (batch_segment == NULL)
		{
			TsdgCountFallback();
			return false;
		}
		dsm_pin_mapping(batch_segment);
		batch_segment_size = size;
	}
	return true;
}

/*
 * A session maps the shared batch area page by page as it first touches it:
 * for 10,000 queries of 128 dimensions that is over 1,500 page faults in the
 * first batch of every session. One madvise maps the pages a batch uses in a
 * single call; where the kernel lacks it the faults happen as before.
 */
static void
TsdgMapBatchPages(char *base, Size bytes)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t	page = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t	start = (uintptr_t) base & ~(page - 1);
	uintptr_t	end = ((uintptr_t) base + bytes + page - 1) & ~(page - 1);

	(void) madvise((void *) start, end - start, MADV_POPULATE_WRITE);
#endif
}

bool
TsdgWorkerBatchArea(TsdgMetric metric, int nq, int dims, int k, TsdgBatchArea *area)
{
	TsdgBulkHeader layout;
	Size		offset = sizeof(TsdgBulkHeader);
	char	   *base;

	if (!TsdgWorkerTakesRequest() || !TsdgWorkerComputes(metric, true))
		return false;
	memset(&layout, 0, sizeof(layout));
	layout.queries = TsdgBulkAdd(&offset, sizeof(float) * dims * (Size) nq);
	layout.tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * (Size) k * nq);
	layout.dists = TsdgBulkAdd(&offset, sizeof(float) * (Size) k * nq);

	batch_in_area = TsdgIpcAcquireBatchArea(offset);
	if (batch_in_area)
	{
		layout.total_size = offset;
		batch_layout = layout;
		base = TsdgBatchAreaBase;
		TsdgMapBatchPages(base, offset);
	}
	else
	{
		if (!TsdgAttachBatchSegment(offset))
			return false;
		layout.total_size = batch_segment_size;
		batch_layout = layout;
		base = dsm_segment_address(batch_segment);
	}
	memcpy(base, &layout, sizeof(layout));
	area->queries = TsdgBulkArray(base, layout.queries);
	area->tids = TsdgBulkArray(base, layout.tids);
	area->dists = TsdgBulkArray(base, layout.dists);
	area->shared = batch_in_area;
	return true;
}

void
TsdgWorkerBatchAreaDone(void)
{
	if (batch_in_area)
	{
		TsdgIpcReleaseBatchArea();
		batch_in_area = false;
	}
	else if (batch_segment != NULL && batch_segment_size > TSDG_KEPT_BATCH_SEGMENT)
		TsdgReleaseBatchSegment();
}

TsdgRoundTrip TsdgLastBatchRoundTrip;

/* where the batch lies, for the worker */
static void
TsdgFillBatchRequest(TsdgRequestSlot *slot, void *arg)
{
	slot->in_batch_area = batch_in_area;
	slot->bulk_handle = batch_in_area ? 0 : dsm_segment_handle(batch_segment);
	slot->bulk_size = batch_layout.total_size;
	batch_in_flight = !batch_in_area;
}

/* an answer comes after the worker let go of the segment */
static void
TsdgBatchWaited(bool answered, void *arg)
{
	batch_in_flight = !batch_in_area && !answered;
}

bool
TsdgWorkerSearchBatch(Relation index, const TsdgMetaPageData *meta, int nq, int k, int ef,
					  int lambda_limit, bool *pending_searched)
{
	/* a batch is one explicit call: it waits as long as the worker lives */
	const TsdgSearchRequest request = {
		.kind = TSDG_REQUEST_SEARCH_BATCH,
		.k = k,
		.ef = ef,
		.lambda_limit = lambda_limit,
		.nq = nq,
		.until_answered = true,
		.fill = TsdgFillBatchRequest,
		.waited = TsdgBatchWaited,
	};
	TsdgRequestSlot *slot;
	TimestampTz submitted_at;

	if (meta->node_count == 0 || (!batch_in_area && (batch_segment == NULL || batch_in_flight)) ||
		!TsdgWorkerTakesWidth(ef, k, true))
		return false;
	slot = TsdgSendSearch(index, meta, &request, &submitted_at);
	if (slot == NULL)
		return false;

	TsdgLastBatchRoundTrip.to_worker_us = slot->taken_at - submitted_at;
	TsdgLastBatchRoundTrip.on_worker_us = slot->answered_at - slot->taken_at;
	TsdgLastBatchRoundTrip.back_us = GetCurrentTimestamp() - slot->answered_at;
	*pending_searched = slot->pending_searched;
	TsdgIpcFinish(slot);
	return true;
}
