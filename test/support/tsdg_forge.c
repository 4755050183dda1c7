/*
 * A hostile client of the GPU worker, for test/t/016_worker_bounds.pl: it
 * writes requests into its session's slot whose sizes do not match the
 * shared memory segment they come with (arrays that end past the segment,
 * counts whose byte sizes overflow), as a bug or a malicious extension in a
 * session could. The worker must answer each with a refusal, never read or
 * write past the segment. Built by the test into its own directory and
 * loaded by path; never installed.
 *
 * tsdg_forge_request(kind text) RETURNS text: 'build', 'build in parts',
 * 'build in parts of no rows', 'merge', 'merge in parts', 'merge in parts of
 * no rows' or 'load';
 * returns "reply N: message" of the worker's answer, or "no answer".
 */
#include "postgres.h"

#include <semaphore.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/backendid.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"

#include "tsdgipc.h"

PG_MODULE_MAGIC;
PG_FUNCTION_INFO_V1(tsdg_forge_request);

/* rows of 8 dimensions: room for this many in the segment, and counts that say more */
#define FORGE_ROWS	1000
#define FORGE_DIMS	8

static TsdgWorkerShared *
AttachShared(void)
{
	bool		found;
	TsdgWorkerShared *shared;
	Size		size = add_size(offsetof(TsdgWorkerShared, slots),
								mul_size(MaxBackends, sizeof(TsdgRequestSlot)));

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("pg_tsdg GPU worker", size, &found);
	LWLockRelease(AddinShmemInitLock);
	if (!found)
		elog(ERROR, "pg_tsdg is not preloaded");
	return shared;
}

/*
 * The segment's layout: the rows and TIDs of FORGE_ROWS rows, the turns of a
 * request in parts, then one small array at the end that every other array
 * offset names, so that an array of the sizes the request claims runs past
 * the segment.
 */
static Size
Place(Size *offset, Size bytes)
{
	Size		start = TYPEALIGN(8, *offset);

	*offset = start + bytes;
	return start;
}

static void
ForgeLayout(TsdgBulkHeader *h)
{
	Size		offset = sizeof(TsdgBulkHeader);
	Size		tail;

	memset(h, 0, sizeof(TsdgBulkHeader));
	h->capacity = FORGE_ROWS;
	h->rows = Place(&offset, sizeof(float) * FORGE_DIMS * FORGE_ROWS);
	h->tids = Place(&offset, sizeof(ItemPointerData) * FORGE_ROWS);
	h->parts = Place(&offset, sizeof(TsdgPartTurns));
	tail = Place(&offset, 64);
	h->neighbors = h->lambdas = h->knn_ids = h->merged_neighbors = h->merged_lambdas =
		h->changed = h->flags = tail;
	h->total_size = offset;
}

Datum
tsdg_forge_request(PG_FUNCTION_ARGS)
{
	char	   *kind = text_to_cstring(PG_GETARG_TEXT_PP(0));
	TsdgWorkerShared *shared = AttachShared();
	TsdgRequestSlot *slot = &shared->slots[MyBackendId - 1];
	TsdgBulkHeader header;
	dsm_segment *seg;
	uint64		request_id;
	char	   *result = NULL;
	TsdgBuildParams params;

	ForgeLayout(&header);
	seg = dsm_create(header.total_size, 0);
	memset(dsm_segment_address(seg), 0, header.total_size);
	memcpy(dsm_segment_address(seg), &header, sizeof(header));
	memset(&params, 0, sizeof(params));
	params.degree = 32;
	params.build_k = 32;
	params.samples = 8;
	params.iterations = 2;
	params.alpha = 1.2f;
	params.lambda0 = 10;
	params.seed = 1;

	SpinLockAcquire(&slot->mutex);
	memset(&slot->args, 0, sizeof(slot->args));
	if (strcmp(kind, "build") == 0)
	{
		/* the rows fit; the graph the worker writes back does not */
		slot->kind = TSDG_REQUEST_BUILD;
		slot->args.build.n = FORGE_ROWS;
		slot->args.build.dims = FORGE_DIMS;
		slot->args.build.metric = TSDG_METRIC_L2;
		slot->args.build.params = params;
	}
	else if (strcmp(kind, "build in parts") == 0 ||
			 strcmp(kind, "build in parts of no rows") == 0)
	{
		/* a part's rows fit, its graph does not; or parts of no rows, which the worker counts by */
		slot->kind = TSDG_REQUEST_BUILD;
		slot->args.build.n = 10 * FORGE_ROWS;
		slot->args.build.dims = FORGE_DIMS;
		slot->args.build.metric = TSDG_METRIC_L2;
		slot->args.build.params = params;
		slot->args.build.in_parts = true;
		if (strcmp(kind, "build in parts of no rows") == 0)
			((TsdgBulkHeader *) dsm_segment_address(seg))->capacity = 0;
	}
	else if (strcmp(kind, "merge") == 0)
	{
		/* new rows that fit, merged lists that do not */
		slot->kind = TSDG_REQUEST_MERGE;
		slot->args.merge.n_old = 0;
		slot->args.merge.n_new = FORGE_ROWS;
		slot->args.merge.dims = FORGE_DIMS;
		slot->args.merge.metric = TSDG_METRIC_L2;
		slot->args.merge.params = params;
	}
	else if (strcmp(kind, "merge in parts") == 0 ||
			 strcmp(kind, "merge in parts of no rows") == 0)
	{
		/* a part's new rows fit, its merged lists do not; or parts of no rows */
		slot->kind = TSDG_REQUEST_MERGE;
		slot->args.merge.n_old = 0;
		slot->args.merge.n_new = 10 * FORGE_ROWS;
		slot->args.merge.dims = FORGE_DIMS;
		slot->args.merge.metric = TSDG_METRIC_L2;
		slot->args.merge.params = params;
		slot->args.merge.in_parts = true;
		if (strcmp(kind, "merge in parts of no rows") == 0)
			((TsdgBulkHeader *) dsm_segment_address(seg))->capacity = 0;
	}
	else if (strcmp(kind, "load") == 0)
	{
		/* a row count whose byte sizes wrap around to fit */
		slot->kind = TSDG_REQUEST_LOAD_INDEX;
		slot->args.load.key.database = MyDatabaseId;
		slot->args.load.key.relfilenode = 1;
		slot->args.load.key.graph_version = 1;
		slot->args.load.n = (int64) 1 << 61;
		slot->args.load.dims = FORGE_DIMS;
		slot->args.load.degree = 32;
		slot->args.load.metric = TSDG_METRIC_L2;
	}
	else
	{
		SpinLockRelease(&slot->mutex);
		elog(ERROR, "unknown request kind \"%s\"", kind);
	}
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	slot->in_batch_area = false;
	slot->cancel_requested = false;
	request_id = pg_atomic_fetch_add_u64(&shared->next_request_id, 1);
	slot->request_id = request_id;
	slot->requester_latch = MyLatch;
	slot->state = TSDG_SLOT_QUEUED;
	SpinLockRelease(&slot->mutex);
	pg_atomic_fetch_add_u32(&shared->queued, 1);
	if (pg_atomic_read_u32(&shared->server_sleeping) != 0)
		(void) sem_post(&shared->wakeup);

	for (int tick = 0; tick < 1200 && result == NULL; tick++)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->request_id == request_id && slot->state == TSDG_SLOT_ANSWERED)
		{
			result = psprintf("reply %d: %s", (int) slot->reply, slot->message);
			slot->state = TSDG_SLOT_FREE;
		}
		SpinLockRelease(&slot->mutex);
		if (result == NULL)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	if (result == NULL)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->state == TSDG_SLOT_QUEUED)
			pg_atomic_fetch_sub_u32(&shared->queued, 1);
		slot->cancel_requested = true;
		slot->state = TSDG_SLOT_FREE;
		SpinLockRelease(&slot->mutex);
		result = "no answer";
	}
	dsm_detach(seg);
	PG_RETURN_TEXT_P(cstring_to_text(result));
}
