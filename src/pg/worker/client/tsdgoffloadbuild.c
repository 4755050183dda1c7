/*
 * An index build handed to the GPU worker (runs in the session that builds):
 * the segment the session reads the table into, the request and its
 * progress, and the wait for the metapage's summary, which the worker
 * computes after its answer (for merges too).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "utils/rel.h"

#include "tsdgoffload.h"

/*
 * The thread that maps a segment's row pages while the heap scan fills them
 * (tsdg_map_pages_ahead), so that the scan does not stop at each page of a
 * segment of gigabytes. The memory context it was made in waits for it too:
 * on an error the segment is detached before, so that the thread's mapping
 * fails and it ends.
 */
typedef struct TsdgRowsMapping
{
	TsdgPageMapping *mapping;
	MemoryContextCallback on_reset;
} TsdgRowsMapping;

static void
TsdgWaitRowsMapping(void *arg)
{
	TsdgRowsMapping *rows_mapping = (TsdgRowsMapping *) arg;

	tsdg_map_pages_wait(rows_mapping->mapping);
	rows_mapping->mapping = NULL;
}

static TsdgRowsMapping *
TsdgMapRowsAhead(float *rows, Size bytes)
{
	TsdgRowsMapping *rows_mapping = palloc0(sizeof(TsdgRowsMapping));

	rows_mapping->mapping = tsdg_map_pages_ahead(rows, bytes);
	rows_mapping->on_reset.func = TsdgWaitRowsMapping;
	rows_mapping->on_reset.arg = rows_mapping;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &rows_mapping->on_reset);
	return rows_mapping;
}

/*
 * the layout of a build segment for capacity rows (of a part of the n rows
 * of a build in parts; n 0: not in parts)
 */
static void
TsdgBuildLayout(TsdgBulkHeader *header, int64 capacity, int dims, const TsdgBuildParams *params,
				int64 parts_of)
{
	Size		offset = sizeof(TsdgBulkHeader);
	bool		in_parts = parts_of > 0;
	Size		layer_lists = (Size) tsdg_layer_node_count(in_parts ? parts_of : capacity) *
		params->degree;

	memset(header, 0, sizeof(TsdgBulkHeader));
	header->capacity = capacity;
	header->summary = TsdgBulkAdd(&offset, sizeof(TsdgBuildSummary));
	if (in_parts)
		header->parts = TsdgBulkAdd(&offset, sizeof(TsdgPartTurns));
	header->rows = TsdgBulkAdd(&offset, sizeof(float) * dims * (Size) capacity);
	header->tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * (Size) capacity);
	header->neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * params->degree * (Size) capacity);
	header->lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * params->degree * (Size) capacity);
	header->knn_ids = TsdgBulkAdd(&offset, sizeof(uint32) * params->build_k * (Size) capacity);
	if (!in_parts)
		header->changed = TsdgBulkAdd(&offset, sizeof(uint8) * (Size) capacity);
	if (layer_lists > 0)
	{
		header->layer_ids = TsdgBulkAdd(&offset, sizeof(uint32) * layer_lists);
		header->layer_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * layer_lists);
	}
	header->total_size = offset;
}

Size
TsdgBuildSegmentBytes(int64 capacity, int dims, const TsdgBuildParams *params, int64 parts_of)
{
	TsdgBulkHeader header;

	TsdgBuildLayout(&header, capacity, dims, params, parts_of);
	return header.total_size;
}

int64
TsdgBuildSegmentRowsWithin(Size max_bytes, int dims, const TsdgBuildParams *params, int64 parts_of)
{
	/* rows enough for a layer, whose lists a segment of all rows holds too */
	const int64 sample = 2 * TSDG_LAYER_MIN_NODES;
	Size		fixed = TsdgBuildSegmentBytes(0, dims, params, parts_of);
	Size		row = (TsdgBuildSegmentBytes(sample, dims, params, parts_of) - fixed) / sample + 1;
	int64		capacity = 1;

	if (max_bytes > fixed)
		capacity = Max((int64) ((max_bytes - fixed) / row), 1);
	/* the arrays' alignment: never past max_bytes but for a single row */
	while (capacity > 1 && TsdgBuildSegmentBytes(capacity, dims, params, parts_of) > max_bytes)
		capacity--;
	return capacity;
}

bool
TsdgBuildSegmentCreate(TsdgBuildSegment *bseg, int64 capacity, int dims,
					   const TsdgBuildParams *params)
{
	return TsdgBuildSegmentMake(bseg, capacity, dims, params, 0);
}

bool
TsdgBuildSegmentMake(TsdgBuildSegment *bseg, int64 capacity, int dims,
					 const TsdgBuildParams *params, int64 parts_of)
{
	TsdgBulkHeader header;
	dsm_segment *seg;
	char	   *base;

	StaticAssertStmt(TSDG_SUMMARY_MAX_ENTRIES == TSDG_MAX_ENTRY_POINTS,
					 "a build summary holds the metapage's entry points");
	memset(bseg, 0, sizeof(TsdgBuildSegment));
	TsdgBuildLayout(&header, capacity, dims, params, parts_of);
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
	bseg->changed = TsdgBulkArray(base, header.changed);
	bseg->layer_ids = TsdgBulkArray(base, header.layer_ids);
	bseg->layer_lambdas = TsdgBulkArray(base, header.layer_lambdas);
	bseg->summary = TsdgBulkArray(base, header.summary);
	pg_atomic_init_u32(&bseg->summary->state, TSDG_SUMMARY_PENDING);
	pg_atomic_init_u32(&bseg->summary->knn_ready, 0);
	pg_atomic_init_u64(&bseg->summary->lists_ready, 0);
	pg_atomic_init_u32(&bseg->summary->rings, TSDG_RINGS_UNKNOWN);
	bseg->parts = TsdgBulkArray(base, header.parts);
	if (bseg->parts != NULL)
		TsdgInitPartTurns(bseg->parts);
	bseg->rows_mapping = TsdgMapRowsAhead(bseg->rows, sizeof(float) * dims * (Size) capacity);
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
	if (bseg->rows_mapping != NULL)
		TsdgWaitRowsMapping(bseg->rows_mapping);
	if (bseg->seg != NULL)
		dsm_detach(bseg->seg);
	memset(bseg, 0, sizeof(TsdgBuildSegment));
}

/* calls *hook (when set) after clearing it, so that it runs once even if it throws */
void
TsdgRunHookOnce(void (**hook) (void *), void *arg)
{
	void		(*fn) (void *) = *hook;

	if (fn == NULL)
		return;
	*hook = NULL;
	fn(arg);
}

/*
 * The hooks of a segment the worker fills while it computes: knn_ready once
 * summary says the k-NN lists are final, lists_ready each time more search
 * lists are out than *lists_seen (a build's and a merge's segments alike).
 */
void
TsdgRunReadyHooks(TsdgBuildSummary *summary, void (**knn_ready) (void *),
				  void (*lists_ready) (void *, int64), int64 *lists_seen, void *arg)
{
	if (*knn_ready != NULL && pg_atomic_read_u32(&summary->knn_ready) != 0)
	{
		pg_read_barrier();
		TsdgRunHookOnce(knn_ready, arg);
	}
	if (lists_ready != NULL)
	{
		int64		ready = (int64) pg_atomic_read_u64(&summary->lists_ready);

		if (ready > *lists_seen)
		{
			pg_read_barrier();
			*lists_seen = ready;
			lists_ready(arg, ready);
		}
	}
}

typedef struct TsdgBuildWait
{
	TsdgPollFn	poll;
	void	   *poll_arg;
	bool		cancelled;
	TsdgBuildSegment *bseg;
	int64		n;
	int			dims;
	const TsdgBuildParams *params;
} TsdgBuildWait;

/*
 * Takes this build's turns when it is in parts, runs the segment's
 * while_building once (in parts, once every row is sent), then its
 * knn_ready once the worker has put the final k-NN lists in the segment and
 * its lists_ready each time more search lists are there, then forwards the
 * worker's progress to the build's poll, which may cancel it.
 */
static bool
TsdgBuildWaitPoll(void *arg, TsdgRequestSlot *slot)
{
	TsdgBuildWait *wait = (TsdgBuildWait *) arg;
	TsdgBuildSegment *bseg = wait->bseg;

	if (bseg->parts == NULL || TsdgTakeBuildTurns(bseg, wait->n, wait->dims, wait->params))
		TsdgRunHookOnce(&bseg->while_building, bseg->hook_arg);
	/* after the row pages, so that the k-NN pages' blocks follow theirs */
	if (bseg->while_building == NULL)
		TsdgRunReadyHooks(bseg->summary, &bseg->knn_ready, bseg->lists_ready, &bseg->lists_seen,
						  bseg->hook_arg);
	if (wait->poll != NULL && slot->phase != 0 &&
		wait->poll(wait->poll_arg, (TsdgBuildPhase) slot->phase, slot->done, slot->total))
		wait->cancelled = true;
	return wait->cancelled;
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
	TsdgBuildWait wait = {poll, poll_arg, false, bseg, n, dims, params};
	TsdgReply	reply;
	TimestampTz start = GetCurrentTimestamp();

	if (n == 0 || bseg->seg == NULL || !TsdgWorkerAwaitRequest() || !TsdgWorkerComputes(metric, false))
		return false;
	Assert(n <= bseg->capacity || bseg->parts != NULL);

	bseg->builder_pid = TsdgServerPid();
	slot = TsdgIpcBeginRequest(TSDG_REQUEST_BUILD);
	memset(&slot->args.build, 0, sizeof(TsdgBuildArgs));
	/* what the build's metapage will say: the worker keeps the graph as that version */
	slot->args.build.key.database = MyDatabaseId;
	slot->args.build.key.tablespace = index->rd_node.spcNode;
	slot->args.build.key.relfilenode = index->rd_node.relNode;
	slot->args.build.key.backend = index->rd_backend;
	slot->args.build.key.graph_version = 1;
	slot->args.build.key.node_count = (uint32) n;
	slot->args.build.n = n;
	slot->args.build.dims = dims;
	slot->args.build.metric = metric;
	slot->args.build.params = *params;
	slot->args.build.in_parts = bseg->parts != NULL;
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
						reply == TSDG_REPLY_OUT_OF_MEMORY ? "the GPU worker is out of memory" :
						"the GPU worker could not build the graph"),
				 errdetail("%s", error->message)));
		return false;
	}
	ereport(LOG,
			(errmsg("tsdg index \"%s\" built on the GPU worker: %lld rows, %.3f s from the request to the answer%s",
					RelationGetRelationName(index), (long long) n,
					(double) (GetCurrentTimestamp() - start) / 1000000.0,
					bseg->parts == NULL ? "" :
					psprintf(", through a shared memory segment of %zu bytes (parts: %lld)",
							 dsm_segment_map_length(bseg->seg),
							 (long long) ((n + bseg->capacity - 1) / bseg->capacity)))));
	*status = TSDG_OK;
	return true;
}

/* a summary the worker has published READY, into meta */
static void
TsdgCopySummary(const TsdgBuildSummary *summary, TsdgMetaPageData *meta)
{
	StaticAssertStmt(TSDG_SUMMARY_MAX_UNREACHED == TSDG_MAX_UNREACHED,
					 "a summary lists as many unreached rows as the metapage");
	pg_read_barrier();
	meta->entry_count = summary->entry_count;
	memcpy(meta->entry_points, summary->entry_points, sizeof(uint32) * summary->entry_count);
	meta->nn1_bound = summary->nn1_bound;
	meta->unreached_count = (int32) Min(summary->unreached_count, TSDG_MAX_UNREACHED);
	memcpy(meta->unreached, summary->unreached, sizeof(uint32) * meta->unreached_count);
}

/*
 * Waits for the summary the worker of pid computes and copies it into meta;
 * false when it failed or died.
 */
bool
TsdgWaitSummary(TsdgBuildSummary *summary, pid_t pid, TsdgMetaPageData *meta)
{
	uint32		state;

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
	TsdgCopySummary(summary, meta);
	return true;
}

bool
TsdgWorkerBuildSummary(TsdgBuildSegment *bseg, TsdgMetaPageData *meta)
{
	return TsdgWaitSummary(bseg->summary, bseg->builder_pid, meta);
}

static void
TsdgBuildSegmentSetRings(TsdgBuildSegment *bseg, TsdgRingsState state)
{
	if (bseg->seg == NULL || bseg->parts != NULL || bseg->summary == NULL)
		return;
	/* the linked lists before the state that tells the worker to read them */
	pg_write_barrier();
	pg_atomic_write_u32(&bseg->summary->rings, state);
}

void
TsdgBuildSegmentRingsFound(TsdgBuildSegment *bseg, bool any)
{
	TsdgBuildSegmentSetRings(bseg, any ? TSDG_RINGS_PENDING : TSDG_RINGS_NONE);
}

void
TsdgBuildSegmentRingsLinked(TsdgBuildSegment *bseg, bool any)
{
	TsdgBuildSegmentSetRings(bseg, any ? TSDG_RINGS_LINKED : TSDG_RINGS_NONE);
}

bool
TsdgSummaryLayer(TsdgBuildSummary *summary, uint32 *seg_ids, uint8 *seg_lambdas, int64 n,
				 uint32 **ids, uint8 **lambdas)
{
	int64		layer_nodes = tsdg_layer_node_count(n);

	if (summary == NULL || pg_atomic_read_u32(&summary->state) != TSDG_SUMMARY_READY)
		return false;
	pg_read_barrier();
	if (layer_nodes > 0 && (summary->layer_nodes != layer_nodes || seg_ids == NULL))
		return false;
	*ids = seg_ids;
	*lambdas = seg_lambdas;
	return true;
}

bool
TsdgWorkerBuildLayer(TsdgBuildSegment *bseg, int64 n, uint32 **ids, uint8 **lambdas)
{
	return TsdgSummaryLayer(bseg->summary, bseg->layer_ids, bseg->layer_lambdas, n, ids, lambdas);
}

bool
TsdgWorkerBuildSummaryIn(TsdgBuildSegment *bseg, TsdgMetaPageData *meta)
{
	if (pg_atomic_read_u32(&bseg->summary->state) != TSDG_SUMMARY_READY)
		return false;
	TsdgCopySummary(bseg->summary, meta);
	return true;
}
