/*
 * What a session hands to the GPU worker: one search, a batch of searches,
 * an index image for the worker to keep resident, a build. Every call returns
 * false where the session should do the work on the CPU instead, so a worker
 * that is missing, busy, slow, out of memory or killed costs a query a CPU
 * search, never a wrong answer or an error.
 */
#include "postgres.h"

#include <sys/mman.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/backendid.h"
#include "storage/dsm.h"
#include "utils/rel.h"
#include "utils/resowner.h"

#include "tsdg.h"
#include "tsdgipc.h"
#include "tsdgworker.h"

/* each kind of fallback is logged once per session, not once per query */
typedef enum TsdgFallbackKind
{
	TSDG_FALLBACK_TIMEOUT,
	TSDG_FALLBACK_WORKER_GONE,
	TSDG_FALLBACK_OUT_OF_MEMORY,
	TSDG_FALLBACK_FAILED,
	TSDG_FALLBACK_KINDS
} TsdgFallbackKind;

static bool fallback_logged[TSDG_FALLBACK_KINDS];

static void
TsdgCountFallback(void)
{
	pg_atomic_fetch_add_u64(&TsdgShared->fallbacks, 1);
}

static void
TsdgLogFallback(TsdgFallbackKind kind, const char *what, const char *detail)
{
	TsdgCountFallback();
	if (fallback_logged[kind])
		return;
	fallback_logged[kind] = true;
	ereport(kind == TSDG_FALLBACK_OUT_OF_MEMORY ? WARNING : LOG,
			(errmsg("pg_tsdg: %s on the CPU: %s", what, detail),
			 errdetail("Logged once per session; tsdg_gpu_status() counts every fallback.")));
}

bool
TsdgWorkerUsable(void)
{
	return TsdgIpcIsAvailable() && tsdg_device != TSDG_DEVICE_CPU &&
		MyBackendId != InvalidBackendId &&
		TsdgIpcServerState() == TSDG_SERVER_READY;
}

/*
 * TsdgWorkerUsable() for a request: a worker that exists but cannot take it
 * now (restarting after a crash, busy with a build or a load) counts as a
 * fallback, since the session does on the CPU what the worker would have done.
 */
static bool
TsdgWorkerTakesRequest(void)
{
	TsdgServerState state;

	if (TsdgWorkerUsable())
		return true;
	if (!TsdgIpcIsAvailable() || tsdg_device == TSDG_DEVICE_CPU)
		return false;
	state = TsdgIpcServerState();
	if (state == TSDG_SERVER_BUSY || state == TSDG_SERVER_STARTING ||
		(state == TSDG_SERVER_STOPPED && TsdgShared->server_starts > 0))
		TsdgCountFallback();
	return false;
}

static void
TsdgIndexKeyOf(Relation index, const TsdgMetaPageData *meta, TsdgIndexKey *key)
{
	memset(key, 0, sizeof(TsdgIndexKey));
	key->database = MyDatabaseId;
	key->relfilenode = index->rd_node.relNode;
	key->graph_version = meta->graph_version;
	key->deleted_count = meta->deleted_count;
	key->node_count = meta->node_count;
	key->last_merge = meta->last_merge;
}

/*
 * A DSM segment of size bytes owned by the current resource owner, or NULL
 * with a WARNING that says what to raise: containers often cap /dev/shm far
 * below what an index or a build needs.
 */
static dsm_segment *
TsdgCreateBulkSegment(Size size, const char *what)
{
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner owner = ResourceOwnerCreate(CurrentResourceOwner, "pg_tsdg bulk segment");
	MemoryContext ctx = CurrentMemoryContext;
	dsm_segment *seg = NULL;
	char	   *failure = NULL;

	/* the segment is created under a private owner, so a failure can be undone here */
	CurrentResourceOwner = owner;
	PG_TRY();
	{
		seg = dsm_create(size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
		if (seg != NULL)
			dsm_pin_mapping(seg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		CurrentResourceOwner = saved_owner;
		MemoryContextSwitchTo(ctx);
		edata = CopyErrorData();
		FlushErrorState();
		failure = edata->message;
		seg = NULL;
	}
	PG_END_TRY();
	CurrentResourceOwner = saved_owner;
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_BEFORE_LOCKS, false, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_LOCKS, false, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_AFTER_LOCKS, false, false);
	ResourceOwnerDelete(owner);

	if (seg == NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a %zu MB shared memory segment for %s; working on the CPU instead",
						(size >> 20) + 1, what),
				 errdetail("%s", failure != NULL ? failure : "Too many dynamic shared memory segments are in use."),
				 errhint("The GPU worker receives bulk data in dynamic shared memory: make /dev/shm larger than %zu MB (docker run --shm-size, a Kubernetes emptyDir with medium Memory), or set tsdg.device = cpu.",
						 (size >> 20) + 1)));
		return NULL;
	}
	/* from here on an error anywhere releases the segment with the transaction */
	dsm_unpin_mapping(seg);
	return seg;
}

/*
 * The last merge's new rows, checked against this session's searches: the
 * worker keeps those they do not reach exact (TsdgMetaPageData.unreached).
 */
static void
TsdgSetUnreachedCheck(TsdgUnreachedCheck *check, const TsdgMetaPageData *meta)
{
	check->rows = meta->unreached_checked;
	check->ef = tsdg_ef_search;
	check->lambda_limit = tsdg_lambda_search;
}

/*
 * Reads the index into a DSM segment and has the worker make it resident.
 * True when the worker now holds key.
 */
static bool
TsdgShipIndex(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key)
{
	int64		n = meta->node_count;
	Size		offset = sizeof(TsdgBulkHeader);
	TsdgBulkHeader header;
	TsdgIndexImage image;
	TsdgMetaPageData after;
	dsm_segment *seg;
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		loaded;

	memset(&header, 0, sizeof(header));
	header.rows = TsdgBulkAdd(&offset, sizeof(float) * meta->dims * n);
	header.neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * meta->degree * n);
	header.lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * meta->degree * n);
	header.tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * n);
	header.flags = TsdgBulkAdd(&offset, sizeof(uint8) * n);
	header.total_size = offset;

	seg = TsdgCreateBulkSegment(header.total_size, "an index the GPU worker loads");
	if (seg == NULL)
	{
		TsdgCountFallback();
		return false;
	}
	memcpy(dsm_segment_address(seg), &header, sizeof(header));
	image.n = n;
	image.dims = meta->dims;
	image.degree = meta->degree;
	image.rows = TsdgBulkArray(dsm_segment_address(seg), header.rows);
	image.neighbors = TsdgBulkArray(dsm_segment_address(seg), header.neighbors);
	image.lambdas = TsdgBulkArray(dsm_segment_address(seg), header.lambdas);
	image.tids = TsdgBulkArray(dsm_segment_address(seg), header.tids);
	image.flags = TsdgBulkArray(dsm_segment_address(seg), header.flags);
	TsdgReadIndexImage(index, meta, &image);

	/* a merge or VACUUM while the pages were read: that image is of no version */
	TsdgReadMeta(index, &after);
	if (after.graph_version != meta->graph_version || after.deleted_count != meta->deleted_count)
	{
		dsm_detach(seg);
		return false;
	}

	slot = TsdgIpcBeginRequest(TSDG_REQUEST_LOAD_INDEX);
	slot->args.load.key = *key;
	slot->args.load.n = n;
	slot->args.load.dims = meta->dims;
	slot->args.load.degree = meta->degree;
	slot->args.load.metric = (TsdgMetric) meta->metric;
	TsdgSetUnreachedCheck(&slot->args.load.check, meta);
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	request_id = TsdgIpcSubmit(slot);
	loaded = TsdgIpcWait(slot, request_id, -1, NULL, NULL) && slot->reply == TSDG_REPLY_OK;
	if (!loaded)
		TsdgLogFallback(slot->reply == TSDG_REPLY_OUT_OF_MEMORY ?
						TSDG_FALLBACK_OUT_OF_MEMORY : TSDG_FALLBACK_FAILED,
						"the GPU worker could not load the index, searching",
						slot->message[0] != '\0' ? slot->message : "the worker stopped");
	TsdgIpcFinish(slot);
	dsm_detach(seg);
	return loaded;
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
		if (TsdgIpcServerState() == TSDG_SERVER_READY)
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
	answered = TsdgIpcWait(slot, request_id, tsdg_worker_timeout_ms, NULL, NULL);
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
	for (int i = 0; i < TsdgShared->cached_count; i++)
		if (TsdgIndexKeysEqual(&TsdgShared->cached[i].key, key))
		{
			have = TsdgShared->cached[i].pending_rows;
			epoch = TsdgShared->cached[i].pending_epoch;
			end_block = TsdgShared->cached[i].pending_end_block;
			end_offset = TsdgShared->cached[i].pending_end_offset;
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

static void
TsdgSetSearchArgs(TsdgSearchArgs *args, const TsdgIndexKey *key, int dims, int k, int ef,
				  int lambda_limit, int nq, const TsdgMetaPageData *meta, int64 pending_rows)
{
	args->key = *key;
	args->dims = dims;
	args->k = k;
	args->ef = ef;
	args->lambda_limit = lambda_limit;
	args->nq = nq;
	args->pending_rows = pending_rows;
	args->pending_epoch = meta->pending_epoch;
}

bool
TsdgWorkerSearch(Relation index, const TsdgMetaPageData *meta, const float *query,
				 int max_results, int ef, int lambda_limit,
				 uint32 *ids, float *dists, ItemPointerData *tids, int *count,
				 bool *pending_searched, float *pending_bound)
{
	TsdgIndexKey key;

	if (meta->dims > TSDG_SLOT_MAX_DIMS || max_results > TSDG_SLOT_MAX_RESULTS ||
		meta->node_count == 0 || !TsdgWorkerTakesRequest())
		return false;
	TsdgIndexKeyOf(index, meta, &key);

	for (int attempt = 0; attempt < 2; attempt++)
	{
		TsdgRequestSlot *slot;
		uint64		request_id;
		bool		answered;
		TimestampTz submitted_at;
		int64		pending_rows = TsdgPendingForWorker(index, meta, &key);

		slot = TsdgIpcBeginRequest(TSDG_REQUEST_SEARCH);
		TsdgSetSearchArgs(&slot->args.search, &key, meta->dims, max_results, ef, lambda_limit, 1,
						  meta, pending_rows);
		memcpy(TsdgSlotQuery(slot), query, sizeof(float) * meta->dims);
		submitted_at = GetCurrentTimestamp();
		request_id = TsdgIpcSubmit(slot);
		answered = TsdgIpcWait(slot, request_id, tsdg_worker_timeout_ms, NULL, NULL);

		if (answered && slot->reply == TSDG_REPLY_OK)
		{
			*count = slot->result_count;
			memcpy(dists, TsdgSlotResultDists(slot), sizeof(float) * *count);
			memcpy(ids, TsdgSlotResultIds(slot, max_results), sizeof(uint32) * *count);
			memcpy(tids, TsdgSlotResultTids(slot, max_results), sizeof(ItemPointerData) * *count);
			*pending_searched = slot->pending_searched;
			*pending_bound = slot->pending_bound;
			/* where a query's round trip goes: log_min_messages = debug1 to see it */
			ereport(DEBUG1,
					(errmsg_internal("tsdg worker search: %lld us to the worker, %lld us on it, %lld us back",
									 (long long) (slot->taken_at - submitted_at),
									 (long long) (slot->answered_at - slot->taken_at),
									 (long long) (GetCurrentTimestamp() - slot->answered_at))));
			TsdgIpcFinish(slot);
			return true;
		}
		if (!TsdgHandleReply(index, meta, &key, slot, answered, attempt == 0))
			return false;
	}
	return false;
}

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
TsdgWorkerBatchArea(int nq, int dims, int k, TsdgBatchArea *area)
{
	TsdgBulkHeader layout;
	Size		offset = sizeof(TsdgBulkHeader);
	char	   *base;

	if (!TsdgWorkerTakesRequest())
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

bool
TsdgWorkerSearchBatch(Relation index, const TsdgMetaPageData *meta, int nq, int k, int ef,
					  int lambda_limit, bool *pending_searched)
{
	TsdgIndexKey key;

	if (meta->node_count == 0 || (!batch_in_area && (batch_segment == NULL || batch_in_flight)))
		return false;
	TsdgIndexKeyOf(index, meta, &key);

	for (int attempt = 0; attempt < 2; attempt++)
	{
		TsdgRequestSlot *slot;
		uint64		request_id;
		bool		answered;
		TimestampTz submitted_at;
		int64		pending_rows = TsdgPendingForWorker(index, meta, &key);

		slot = TsdgIpcBeginRequest(TSDG_REQUEST_SEARCH_BATCH);
		TsdgSetSearchArgs(&slot->args.search, &key, meta->dims, k, ef, lambda_limit, nq,
						  meta, pending_rows);
		slot->in_batch_area = batch_in_area;
		slot->bulk_handle = batch_in_area ? 0 : dsm_segment_handle(batch_segment);
		slot->bulk_size = batch_layout.total_size;
		batch_in_flight = !batch_in_area;
		submitted_at = GetCurrentTimestamp();
		request_id = TsdgIpcSubmit(slot);
		/* a batch is one explicit call: wait as long as the worker lives */
		answered = TsdgIpcWait(slot, request_id, -1, NULL, NULL);
		/* an answer comes after the worker let go of the segment */
		batch_in_flight = !batch_in_area && !answered;

		if (answered && slot->reply == TSDG_REPLY_OK)
		{
			TsdgLastBatchRoundTrip.to_worker_us = slot->taken_at - submitted_at;
			TsdgLastBatchRoundTrip.on_worker_us = slot->answered_at - slot->taken_at;
			TsdgLastBatchRoundTrip.back_us = GetCurrentTimestamp() - slot->answered_at;
			*pending_searched = slot->pending_searched;
			TsdgIpcFinish(slot);
			return true;
		}
		if (!TsdgHandleReply(index, meta, &key, slot, answered, attempt == 0))
			return false;
	}
	return false;
}

/* the layout of a build segment for capacity rows */
static void
TsdgBuildLayout(TsdgBulkHeader *header, int64 capacity, int dims, const TsdgBuildParams *params)
{
	Size		offset = sizeof(TsdgBulkHeader);

	memset(header, 0, sizeof(TsdgBulkHeader));
	header->capacity = capacity;
	header->summary = TsdgBulkAdd(&offset, sizeof(TsdgBuildSummary));
	header->rows = TsdgBulkAdd(&offset, sizeof(float) * dims * (Size) capacity);
	header->tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * (Size) capacity);
	header->neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * (Size) capacity);
	header->lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * (Size) capacity);
	header->knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * (Size) capacity);
	header->total_size = offset;
}

bool
TsdgBuildSegmentCreate(TsdgBuildSegment *bseg, int64 capacity, int dims,
					   const TsdgBuildParams *params)
{
	TsdgBulkHeader header;
	dsm_segment *seg;
	char	   *base;

	StaticAssertStmt(TSDG_SUMMARY_MAX_ENTRIES == TSDG_MAX_ENTRY_POINTS,
					 "a build summary holds the metapage's entry points");
	memset(bseg, 0, sizeof(TsdgBuildSegment));
	TsdgBuildLayout(&header, capacity, dims, params);
	seg = TsdgCreateBulkSegment(header.total_size, "the rows of an index build on the GPU");
	if (seg == NULL)
	{
		TsdgCountFallback();
		return false;
	}
	base = dsm_segment_address(seg);
	memcpy(base, &header, sizeof(header));
	bseg->seg = seg;
	bseg->capacity = capacity;
	bseg->rows = TsdgBulkArray(base, header.rows);
	bseg->tids = TsdgBulkArray(base, header.tids);
	bseg->neighbors = TsdgBulkArray(base, header.neighbors);
	bseg->lambdas = TsdgBulkArray(base, header.lambdas);
	bseg->knn_ids = TsdgBulkArray(base, header.knn_ids);
	bseg->summary = TsdgBulkArray(base, header.summary);
	pg_atomic_init_u32(&bseg->summary->state, TSDG_SUMMARY_PENDING);
	return true;
}

bool
TsdgBuildSegmentGrow(TsdgBuildSegment *bseg, int64 count, int64 capacity, int dims,
					 const TsdgBuildParams *params)
{
	TsdgBuildSegment grown;

	Assert(count <= bseg->capacity && count <= capacity);
	if (!TsdgBuildSegmentCreate(&grown, capacity, dims, params))
		return false;
	memcpy(grown.rows, bseg->rows, sizeof(float) * dims * (Size) count);
	memcpy(grown.tids, bseg->tids, sizeof(ItemPointerData) * (Size) count);
	TsdgBuildSegmentRelease(bseg);
	*bseg = grown;
	return true;
}

void
TsdgBuildSegmentRelease(TsdgBuildSegment *bseg)
{
	if (bseg->seg != NULL)
		dsm_detach(bseg->seg);
	memset(bseg, 0, sizeof(TsdgBuildSegment));
}

/* calls *hook (when set) after clearing it, so that it runs once even if it throws */
static void
TsdgRunHookOnce(void (**hook) (void *), void *arg)
{
	void		(*fn) (void *) = *hook;

	if (fn == NULL)
		return;
	*hook = NULL;
	fn(arg);
}

typedef struct TsdgBuildWait
{
	TsdgPollFn	poll;
	void	   *poll_arg;
	bool		cancelled;
	TsdgBuildSegment *bseg;
} TsdgBuildWait;

/*
 * Runs the segment's while_building once, then forwards the worker's
 * progress to the build's poll, which may cancel it.
 */
static bool
TsdgBuildWaitPoll(void *arg, TsdgRequestSlot *slot)
{
	TsdgBuildWait *wait = (TsdgBuildWait *) arg;

	TsdgRunHookOnce(&wait->bseg->while_building, wait->bseg->while_building_arg);
	if (wait->poll != NULL && slot->phase != 0 &&
		wait->poll(wait->poll_arg, (TsdgBuildPhase) slot->phase, slot->done, slot->total))
		wait->cancelled = true;
	return wait->cancelled;
}

static pid_t
TsdgServerPid(void)
{
	pid_t		pid;

	SpinLockAcquire(&TsdgShared->mutex);
	pid = TsdgShared->server_pid;
	SpinLockRelease(&TsdgShared->mutex);
	return pid;
}

bool
TsdgWorkerBuildGraph(Relation index, TsdgBuildSegment *bseg, int64 n, int dims,
					 TsdgMetric metric, const TsdgBuildParams *params,
					 TsdgPollFn poll, void *poll_arg,
					 TsdgStatus *status, TsdgError *error)
{
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		answered;
	TsdgBuildWait wait = {poll, poll_arg, false, bseg};
	TsdgReply	reply;
	TimestampTz start = GetCurrentTimestamp();

	if (n == 0 || bseg->seg == NULL || !TsdgWorkerTakesRequest())
		return false;
	Assert(n <= bseg->capacity);

	bseg->builder_pid = TsdgServerPid();
	slot = TsdgIpcBeginRequest(TSDG_REQUEST_BUILD);
	memset(&slot->args.build, 0, sizeof(TsdgBuildArgs));
	/* what the build's metapage will say: the worker keeps the graph as that version */
	slot->args.build.key.database = MyDatabaseId;
	slot->args.build.key.relfilenode = index->rd_node.relNode;
	slot->args.build.key.graph_version = 1;
	slot->args.build.key.node_count = (uint32) n;
	slot->args.build.n = n;
	slot->args.build.dims = dims;
	slot->args.build.metric = metric;
	slot->args.build.params = *params;
	slot->bulk_handle = dsm_segment_handle(bseg->seg);
	slot->bulk_size = ((TsdgBulkHeader *) dsm_segment_address(bseg->seg))->total_size;
	request_id = TsdgIpcSubmit(slot);
	answered = TsdgIpcWait(slot, request_id, -1, TsdgBuildWaitPoll, &wait);
	reply = answered ? slot->reply : TSDG_REPLY_FAILED;
	strlcpy(error->message, answered ? slot->message : "the GPU worker stopped during the build",
			sizeof(error->message));
	TsdgIpcFinish(slot);

	if (wait.cancelled || reply == TSDG_REPLY_CANCELLED)
	{
		*status = TSDG_ERR_CANCELLED;
		return true;
	}
	if (reply != TSDG_REPLY_OK)
	{
		TsdgCountFallback();
		ereport(WARNING,
				(errmsg("tsdg index build falls back to the CPU: %s",
						reply == TSDG_REPLY_OUT_OF_MEMORY ? "the GPU is out of memory" :
						"the GPU worker could not build the graph"),
				 errdetail("%s", error->message)));
		return false;
	}
	ereport(LOG,
			(errmsg("tsdg index \"%s\" built on the GPU worker: %lld rows, %.3f s from the request to the answer",
					RelationGetRelationName(index), (long long) n,
					(double) (GetCurrentTimestamp() - start) / 1000000.0)));
	*status = TSDG_OK;
	return true;
}

/*
 * Waits for the summary the worker of pid computes and copies it into meta;
 * false when it failed or died.
 */
static bool
TsdgWaitSummary(TsdgBuildSummary *summary, pid_t pid, TsdgMetaPageData *meta)
{
	uint32		state;

	StaticAssertStmt(TSDG_SUMMARY_MAX_UNREACHED == TSDG_MAX_UNREACHED,
					 "a summary lists as many unreached rows as the metapage");
	/* the worker sets this backend's latch when it is done; the ticks watch for its death */
	while ((state = pg_atomic_read_u32(&summary->state)) == TSDG_SUMMARY_PENDING &&
		   TsdgServerPid() == pid)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (state != TSDG_SUMMARY_READY)
		return false;
	pg_read_barrier();
	meta->entry_count = summary->entry_count;
	memcpy(meta->entry_points, summary->entry_points, sizeof(uint32) * summary->entry_count);
	meta->nn1_bound = summary->nn1_bound;
	meta->unreached_count = (int32) Min(summary->unreached_count, TSDG_MAX_UNREACHED);
	memcpy(meta->unreached, summary->unreached, sizeof(uint32) * meta->unreached_count);
	return true;
}

bool
TsdgWorkerBuildSummary(TsdgBuildSegment *bseg, TsdgMetaPageData *meta)
{
	return TsdgWaitSummary(bseg->summary, bseg->builder_pid, meta);
}

bool
TsdgWorkerMergeSummary(TsdgMergeSegment *mseg, TsdgMetaPageData *meta)
{
	return mseg->summary_pid != 0 && TsdgWaitSummary(mseg->summary, mseg->summary_pid, meta);
}

/* the layout of a merge segment (see TsdgBulkHeader) */
static void
TsdgMergeLayout(TsdgBulkHeader *header, int64 n_old, int64 n_new, int dims,
				const TsdgBuildParams *params, bool with_old_lists, bool with_dists,
				bool with_changed, bool with_summary, bool with_old_rows, bool with_merged_knn)
{
	Size		offset = sizeof(TsdgBulkHeader);
	Size		n = (Size) (n_old + n_new);

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
					   const TsdgBuildParams *params, bool with_repairs, bool with_old_lists,
					   bool with_old_rows, bool with_merged_knn)
{
	TsdgBulkHeader header;
	dsm_segment *seg;
	char	   *base;

	memset(mseg, 0, sizeof(TsdgMergeSegment));
	/* a busy worker is counted as a fallback once, by TsdgWorkerMergeGraph */
	if (old_capacity + new_capacity == 0 || !TsdgWorkerUsable())
		return false;
	TsdgMergeLayout(&header, old_capacity, new_capacity, dims, params, with_old_lists, with_repairs,
					true, true, with_old_rows, with_merged_knn);
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
	mseg->old_knn_dists = with_repairs ? TsdgBulkArray(base, header.dists) : NULL;
	mseg->old_neighbors = TsdgBulkArray(base, header.neighbors);
	mseg->old_lambdas = TsdgBulkArray(base, header.lambdas);
	mseg->old_changed = TsdgBulkArray(base, header.flags);
	memset(mseg->old_changed, 0, (Size) old_capacity);
	mseg->knn_ids = TsdgBulkArray(base, header.merged_knn_ids);
	mseg->neighbors = TsdgBulkArray(base, header.merged_neighbors);
	mseg->lambdas = TsdgBulkArray(base, header.merged_lambdas);
	mseg->changed = TsdgBulkArray(base, header.changed);
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
	memset(mseg, 0, sizeof(TsdgMergeSegment));
}

TsdgWorkerCopy
TsdgWorkerCopyOf(Relation index, const TsdgMetaPageData *meta)
{
	TsdgIndexKey key;
	TsdgWorkerCopy copy = TSDG_COPY_NONE;

	TsdgIndexKeyOf(index, meta, &key);
	SpinLockAcquire(&TsdgShared->mutex);
	for (int i = 0; i < TsdgShared->cached_count && copy == TSDG_COPY_NONE; i++)
		if (memcmp(&TsdgShared->cached[i].key, &key, sizeof(key)) == 0)
			copy = TsdgShared->cached[i].with_knn ? TSDG_COPY_GRAPH : TSDG_COPY_ROWS;
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
	if (mseg->knn_ready != NULL && pg_atomic_read_u32(&mseg->summary->knn_ready) != 0)
	{
		pg_read_barrier();
		TsdgRunHookOnce(&mseg->knn_ready, mseg->hook_arg);
	}
	if (mseg->lists_ready != NULL)
	{
		int64		ready = (int64) pg_atomic_read_u64(&mseg->summary->lists_ready);

		if (ready > mseg->lists_seen)
		{
			pg_read_barrier();
			mseg->lists_seen = ready;
			mseg->lists_ready(mseg->hook_arg, ready);
		}
	}
	return false;
}

TsdgWorkerMerge
TsdgWorkerMergeGraph(Relation index, TsdgMergeSegment *mseg, const TsdgMetaPageData *old_meta,
					 TsdgWorkerCopy left, const TsdgMetaPageData *new_meta,
					 const ItemPointerData *tids,
					 const float *rows, int64 n_old, int64 n_new, int dims, TsdgMetric metric,
					 const TsdgBuildParams *params,
					 const uint32 *old_knn_ids, const float *old_knn_dists,
					 const uint32 *old_neighbors, const uint8 *old_lambdas,
					 const uint8 *old_changed, uint32 *knn_ids,
					 uint32 *neighbors, uint8 *lambdas, uint8 *changed)
{
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

	Assert(left == TSDG_COPY_NONE || (mseg != NULL && mseg->seg != NULL));
	/* a segment made without the old lists or rows (the worker had them) cannot carry them now */
	if (mseg != NULL && mseg->seg != NULL && n_old > 0 &&
		((left != TSDG_COPY_GRAPH && mseg->old_knn_ids == NULL) ||
		 (left == TSDG_COPY_NONE && mseg->rows_from > 0)))
		mseg = NULL;
	if (n == 0)
		return TSDG_WORKER_DECLINED;
	if (!TsdgWorkerTakesRequest())
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
		TsdgMergeLayout(&header, n_old, n_new, dims, params, true, old_knn_dists != NULL,
						old_changed != NULL, false, true, true);
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
		TsdgBulkCopyIn(base, header.knn_ids, old_knn_ids, sizeof(uint32) * k * (Size) n_old);
		TsdgBulkCopyIn(base, header.neighbors, old_neighbors, sizeof(uint32) * degree * (Size) n_old);
		TsdgBulkCopyIn(base, header.lambdas, old_lambdas, sizeof(uint8) * degree * (Size) n_old);
	}
	TsdgBulkCopyIn(base, header.dists, old_knn_dists, sizeof(float) * k * (Size) n_old);
	TsdgBulkCopyIn(base, header.flags, old_changed, sizeof(uint8) * (Size) n_old);

	slot = TsdgIpcBeginRequest(TSDG_REQUEST_MERGE);
	memset(&slot->args.merge, 0, sizeof(TsdgMergeArgs));
	slot->args.merge.database = MyDatabaseId;
	slot->args.merge.relfilenode = index->rd_node.relNode;
	slot->args.merge.n_old = n_old;
	slot->args.merge.n_new = n_new;
	slot->args.merge.dims = dims;
	slot->args.merge.metric = metric;
	slot->args.merge.params = *params;
	TsdgIndexKeyOf(index, old_meta, &slot->args.merge.old_key);
	slot->args.merge.rows_resident = left != TSDG_COPY_NONE;
	slot->args.merge.graph_resident = left == TSDG_COPY_GRAPH;
	TsdgIndexKeyOf(index, new_meta, &slot->args.merge.new_key);
	TsdgSetUnreachedCheck(&slot->args.merge.check, new_meta);
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

	if (reply == TSDG_REPLY_NOT_RESIDENT && left != TSDG_COPY_NONE)
		return TSDG_WORKER_NEEDS_OLD_GRAPH;
	/* CANCELLED too: this session's cancel throws out of the wait, so the worker was shut down */
	if (reply != TSDG_REPLY_OK)
	{
		if (seg != (mseg != NULL ? mseg->seg : NULL))
			dsm_detach(seg);
		TsdgCountFallback();
		ereport(reply == TSDG_REPLY_OUT_OF_MEMORY ? WARNING : LOG,
				(errmsg("tsdg merge of index \"%s\" falls back to the CPU: %s",
						RelationGetRelationName(index),
						!answered ? "the GPU worker stopped during the merge" :
						reply == TSDG_REPLY_OUT_OF_MEMORY ? "the GPU is out of memory" :
						"the GPU worker could not merge the graph"),
				 errdetail("%s", message)));
		return TSDG_WORKER_DECLINED;
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
		TsdgBulkCopyOut(knn_ids, base, header.merged_knn_ids, sizeof(uint32) * k * (Size) n);
	TsdgBulkCopyOut(neighbors, base, header.merged_neighbors, sizeof(uint32) * degree * (Size) n);
	TsdgBulkCopyOut(lambdas, base, header.merged_lambdas, sizeof(uint8) * degree * (Size) n);
	TsdgBulkCopyOut(changed, base, header.changed, sizeof(uint8) * (Size) n);
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
