/*
 * The request slots shared by the sessions and the GPU worker: the shared
 * memory segment, the slot protocol of both sides, the batch area, and the
 * layout helpers of bulk (DSM) segments. See tsdgipc.h for the protocol.
 * Runs in every process of the worker protocol: the sessions, the supervisor
 * and the GPU server.
 */
#include "postgres.h"

#include <errno.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/float.h"
#include "utils/wait_event.h"

#include "tsdgipc.h"

/* how often a waiting backend looks at the worker's state and runs its poll */
#define TSDG_WAIT_TICK_MS	50

TsdgWorkerShared *TsdgShared = NULL;
char	   *TsdgBatchAreaBase = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static bool slot_exit_callback_registered = false;
static bool batch_area_callbacks_registered = false;

static Size
TsdgIpcShmemSize(void)
{
	return add_size(offsetof(TsdgWorkerShared, slots),
					mul_size(MaxBackends, sizeof(TsdgRequestSlot)));
}

static Size
TsdgBatchAreaSize(void)
{
	return (Size) tsdg_batch_memory_mb * 1024 * 1024;
}

static void
TsdgIpcShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(TsdgIpcShmemSize());
	RequestAddinShmemSpace(TsdgBatchAreaSize());
}

static void
TsdgIpcShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	TsdgShared = ShmemInitStruct("pg_tsdg GPU worker", TsdgIpcShmemSize(), &found);
	if (!found)
	{
		memset(TsdgShared, 0, TsdgIpcShmemSize());
		SpinLockInit(&TsdgShared->mutex);
		TsdgShared->state = TSDG_SERVER_STOPPED;
		if (sem_init(&TsdgShared->wakeup, 1, 0) != 0)
			ereport(FATAL,
					(errmsg("could not initialize the pg_tsdg GPU worker semaphore: %m")));
		pg_atomic_init_u64(&TsdgShared->next_request_id, 1);
		pg_atomic_init_u32(&TsdgShared->queued, 0);
		pg_atomic_init_u32(&TsdgShared->server_sleeping, 0);
		pg_atomic_init_u64(&TsdgShared->batches, 0);
		pg_atomic_init_u64(&TsdgShared->batched_queries, 0);
		pg_atomic_init_u64(&TsdgShared->builds, 0);
		pg_atomic_init_u64(&TsdgShared->loads, 0);
		pg_atomic_init_u64(&TsdgShared->fallbacks, 0);
		pg_atomic_init_u32(&TsdgShared->metrics, 0);
		TsdgShared->slot_count = MaxBackends;
		for (int i = 0; i < MaxBackends; i++)
			SpinLockInit(&TsdgShared->slots[i].mutex);
		SpinLockInit(&TsdgShared->batch_area.mutex);
		TsdgShared->batch_area.size = TsdgBatchAreaSize();
	}
	if (TsdgShared->batch_area.size > 0)
		TsdgBatchAreaBase = ShmemInitStruct("pg_tsdg batch area", TsdgShared->batch_area.size, &found);
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
TsdgIpcRequestShmem(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = TsdgIpcShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = TsdgIpcShmemStartup;
}

/* true when the segment exists: pg_tsdg was preloaded */
bool
TsdgIpcIsAvailable(void)
{
	return TsdgShared != NULL;
}

/*
 * Read without the mutex: every session looks at the state at least twice per
 * query (may it send work, is the worker alive while it waits), and one
 * spinlock taken by all of them is contended at many clients. The state is a
 * single aligned word, and it is only ever a hint: a request sent just as the
 * worker stops is answered by TsdgIpcFailAll, or the wait gives up.
 */
TsdgServerState
TsdgIpcServerState(void)
{
	if (TsdgShared == NULL)
		return TSDG_SERVER_STOPPED;
	return ((volatile TsdgWorkerShared *) TsdgShared)->state;
}

void
TsdgIpcSetServerState(TsdgServerState state, const char *device, const char *error)
{
	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->state = state;
	if (device != NULL)
		strlcpy(TsdgShared->device, device, sizeof(TsdgShared->device));
	if (error != NULL)
		strlcpy(TsdgShared->last_error, error, sizeof(TsdgShared->last_error));
	SpinLockRelease(&TsdgShared->mutex);
}

/* Reserves bytes (8-byte aligned) at *offset; returns where they start. */
Size
TsdgBulkAdd(Size *offset, Size bytes)
{
	Size		start = TYPEALIGN(8, *offset);

	*offset = start + bytes;
	return start;
}

void *
TsdgBulkArray(void *base, Size offset)
{
	return offset == 0 ? NULL : (char *) base + offset;
}

/* ---- backend side ---- */

static TsdgRequestSlot *
TsdgMySlot(void)
{
	Assert(MyBackendId != InvalidBackendId && MyBackendId <= TsdgShared->slot_count);
	return &TsdgShared->slots[MyBackendId - 1];
}

/* A backend that exits while waiting leaves its slot free for the next one. */
static void
TsdgIpcReleaseSlotAtExit(int code, Datum arg)
{
	TsdgRequestSlot *slot = TsdgMySlot();

	SpinLockAcquire(&slot->mutex);
	if (slot->state == TSDG_SLOT_QUEUED)
		pg_atomic_fetch_sub_u32(&TsdgShared->queued, 1);
	slot->state = TSDG_SLOT_FREE;
	slot->cancel_requested = true;
	slot->requester_latch = NULL;
	SpinLockRelease(&slot->mutex);
}

TsdgRequestSlot *
TsdgIpcBeginRequest(TsdgRequestKind kind)
{
	TsdgRequestSlot *slot = TsdgMySlot();

	if (!slot_exit_callback_registered)
	{
		before_shmem_exit(TsdgIpcReleaseSlotAtExit, (Datum) 0);
		slot_exit_callback_registered = true;
	}

	SpinLockAcquire(&slot->mutex);
	if (slot->state == TSDG_SLOT_QUEUED)
		pg_atomic_fetch_sub_u32(&TsdgShared->queued, 1);
	slot->state = TSDG_SLOT_FREE;
	slot->kind = kind;
	slot->cancel_requested = false;
	slot->bulk_handle = 0;
	slot->bulk_size = 0;
	slot->in_batch_area = false;
	slot->phase = 0;
	slot->done = 0;
	slot->total = 0;
	slot->reply = TSDG_REPLY_FAILED;
	slot->result_count = 0;
	slot->pending_searched = false;
	slot->message[0] = '\0';
	SpinLockRelease(&slot->mutex);
	return slot;
}

uint64
TsdgIpcSubmit(TsdgRequestSlot *slot)
{
	uint64		request_id = pg_atomic_fetch_add_u64(&TsdgShared->next_request_id, 1);

	ResetLatch(MyLatch);
	SpinLockAcquire(&slot->mutex);
	slot->request_id = request_id;
	slot->requester_latch = MyLatch;
	slot->state = TSDG_SLOT_QUEUED;
	SpinLockRelease(&slot->mutex);
	/* a full barrier: the server sets server_sleeping before it looks at queued */
	pg_atomic_fetch_add_u32(&TsdgShared->queued, 1);
	TsdgIpcWakeServer();
	return request_id;
}

/* callers make what the server should see visible first, with a full barrier */
void
TsdgIpcWakeServer(void)
{
	if (pg_atomic_read_u32(&TsdgShared->server_sleeping) != 0 &&
		sem_post(&TsdgShared->wakeup) != 0)
		elog(WARNING, "could not wake the pg_tsdg GPU worker: %m");
}

void
TsdgIpcAbandon(TsdgRequestSlot *slot, uint64 request_id)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == request_id)
	{
		if (slot->state == TSDG_SLOT_QUEUED)
			pg_atomic_fetch_sub_u32(&TsdgShared->queued, 1);
		slot->cancel_requested = true;
		slot->state = TSDG_SLOT_FREE;
	}
	SpinLockRelease(&slot->mutex);
}

void
TsdgIpcFinish(TsdgRequestSlot *slot)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->state == TSDG_SLOT_ANSWERED)
		slot->state = TSDG_SLOT_FREE;
	SpinLockRelease(&slot->mutex);
}

/*
 * Gives the batch area up if this session holds it: after its batch, and at
 * the end of a transaction or session that an error took out of the batch
 * (the worker's flag keeps it from others while a given-up request runs).
 */
void
TsdgIpcReleaseBatchArea(void)
{
	TsdgBatchAreaState *area = &TsdgShared->batch_area;

	SpinLockAcquire(&area->mutex);
	if (area->owner == MyBackendId)
		area->owner = 0;
	SpinLockRelease(&area->mutex);
}

static void
TsdgReleaseBatchAreaAtXactEnd(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PARALLEL_COMMIT)
		TsdgIpcReleaseBatchArea();
}

static void
TsdgReleaseBatchAreaAtExit(int code, Datum arg)
{
	TsdgIpcReleaseBatchArea();
}

bool
TsdgIpcAcquireBatchArea(Size size)
{
	TsdgBatchAreaState *area = &TsdgShared->batch_area;
	bool		acquired = false;

	if (TsdgBatchAreaBase == NULL || size > area->size)
		return false;
	if (!batch_area_callbacks_registered)
	{
		RegisterXactCallback(TsdgReleaseBatchAreaAtXactEnd, NULL);
		before_shmem_exit(TsdgReleaseBatchAreaAtExit, (Datum) 0);
		batch_area_callbacks_registered = true;
	}
	SpinLockAcquire(&area->mutex);
	/* this session's own, where a subtransaction caught the error of its last batch */
	if ((area->owner == 0 || area->owner == MyBackendId) && !area->worker_busy)
	{
		area->owner = MyBackendId;
		acquired = true;
	}
	SpinLockRelease(&area->mutex);
	return acquired;
}

static bool
TsdgServerAlive(void)
{
	TsdgServerState state = TsdgIpcServerState();

	return state == TSDG_SERVER_READY || state == TSDG_SERVER_BUSY;
}

bool
TsdgIpcWait(TsdgRequestSlot *slot, uint64 request_id, int timeout_ms,
			TsdgWaitPollFn poll, void *poll_arg)
{
	TimestampTz start = GetCurrentTimestamp();
	bool		answered = false;

	PG_TRY();
	{
		for (;;)
		{
			TsdgSlotState state;
			uint64		current_id;
			long		wait_ms = TSDG_WAIT_TICK_MS;

			SpinLockAcquire(&slot->mutex);
			state = slot->state;
			current_id = slot->request_id;
			SpinLockRelease(&slot->mutex);

			if (current_id != request_id)
				break;			/* taken over by a later request: never ours again */
			if (state == TSDG_SLOT_ANSWERED)
			{
				answered = true;
				break;
			}
			if (!TsdgServerAlive())
				break;
			if (poll != NULL && poll(poll_arg, slot))
				break;
			if (timeout_ms >= 0)
			{
				long		elapsed_ms = (long) ((GetCurrentTimestamp() - start) / 1000);

				if (elapsed_ms >= timeout_ms)
					break;
				wait_ms = Min(wait_ms, timeout_ms - elapsed_ms);
			}

			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 wait_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		TsdgIpcAbandon(slot, request_id);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!answered)
		TsdgIpcAbandon(slot, request_id);
	return answered;
}

/* ---- server side ---- */

bool
TsdgIpcTake(TsdgRequestSlot *slot, TsdgRequestSlot *copy, float *query)
{
	bool		taken = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->state == TSDG_SLOT_QUEUED)
	{
		slot->state = TSDG_SLOT_RUNNING;
		slot->taken_at = GetCurrentTimestamp();
		memcpy(copy, slot, offsetof(TsdgRequestSlot, payload));
		/*
		 * The dimension count sizes the copy: one outside the payload copies
		 * nothing, and no resident graph has it, so the search is refused.
		 */
		if (query != NULL && slot->kind == TSDG_REQUEST_SEARCH &&
			slot->args.search.dims > 0 && slot->args.search.dims <= TSDG_SLOT_MAX_DIMS)
			memcpy(query, TsdgSlotQuery(slot), sizeof(float) * slot->args.search.dims);
		if (slot->kind == TSDG_REQUEST_SEARCH_BATCH && slot->in_batch_area)
		{
			/* before the slot's spinlock is let go: see TsdgBatchAreaState */
			SpinLockAcquire(&TsdgShared->batch_area.mutex);
			TsdgShared->batch_area.worker_busy = true;
			SpinLockRelease(&TsdgShared->batch_area.mutex);
		}
		taken = true;
	}
	SpinLockRelease(&slot->mutex);
	if (taken)
		pg_atomic_fetch_sub_u32(&TsdgShared->queued, 1);
	return taken;
}

bool
TsdgIndexKeysEqual(const TsdgIndexKey *a, const TsdgIndexKey *b)
{
	return a->database == b->database && a->tablespace == b->tablespace &&
		a->relfilenode == b->relfilenode && a->backend == b->backend &&
		a->graph_version == b->graph_version && a->deleted_count == b->deleted_count &&
		a->node_count == b->node_count && a->last_merge == b->last_merge;
}

bool
TsdgIpcAnswer(TsdgRequestSlot *slot, uint64 request_id, TsdgReply reply, const char *message)
{
	TsdgSearchAnswer none = {0, NULL, NULL, NULL, 0, false, get_float4_infinity()};

	return TsdgIpcAnswerSearch(slot, request_id, reply, &none, message);
}

bool
TsdgIpcAnswerSearch(TsdgRequestSlot *slot, uint64 request_id, TsdgReply reply,
					const TsdgSearchAnswer *answer, const char *message)
{
	Latch	   *latch = NULL;

	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == request_id && slot->state == TSDG_SLOT_RUNNING)
	{
		slot->reply = reply;
		slot->result_count = answer->result_count;
		slot->pending_searched = answer->pending_searched;
		slot->pending_bound = answer->pending_bound;
		if (answer->dists != NULL && answer->result_count > 0)
		{
			memcpy(TsdgSlotResultDists(slot), answer->dists, sizeof(float) * answer->result_count);
			memcpy(TsdgSlotResultIds(slot, answer->max_results), answer->ids,
				   sizeof(uint32) * answer->result_count);
			memcpy(TsdgSlotResultTids(slot, answer->max_results), answer->tids,
				   sizeof(ItemPointerData) * answer->result_count);
		}
		strlcpy(slot->message, message != NULL ? message : "", sizeof(slot->message));
		slot->answered_at = GetCurrentTimestamp();
		slot->state = TSDG_SLOT_ANSWERED;
		latch = slot->requester_latch;
	}
	SpinLockRelease(&slot->mutex);

	if (latch != NULL)
		SetLatch(latch);
	return latch != NULL;
}

bool
TsdgIpcCancelRequested(TsdgRequestSlot *slot, uint64 request_id)
{
	bool		cancel;

	SpinLockAcquire(&slot->mutex);
	cancel = slot->request_id != request_id || slot->cancel_requested ||
		slot->state != TSDG_SLOT_RUNNING;
	SpinLockRelease(&slot->mutex);
	return cancel;
}

void
TsdgIpcReportProgress(TsdgRequestSlot *slot, uint64 request_id, int phase,
					  int64 done, int64 total)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == request_id)
	{
		slot->phase = phase;
		slot->done = done;
		slot->total = total;
	}
	SpinLockRelease(&slot->mutex);
}

void
TsdgIpcLetGoOfBatchArea(void)
{
	SpinLockAcquire(&TsdgShared->batch_area.mutex);
	TsdgShared->batch_area.worker_busy = false;
	SpinLockRelease(&TsdgShared->batch_area.mutex);
}

void
TsdgIpcFailAll(const char *message)
{
	/* the worker is gone: nothing of it reads or writes the batch area any more */
	TsdgIpcLetGoOfBatchArea();

	for (int i = 0; i < TsdgShared->slot_count; i++)
	{
		TsdgRequestSlot *slot = &TsdgShared->slots[i];
		Latch	   *latch = NULL;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == TSDG_SLOT_QUEUED || slot->state == TSDG_SLOT_RUNNING)
		{
			if (slot->state == TSDG_SLOT_QUEUED)
				pg_atomic_fetch_sub_u32(&TsdgShared->queued, 1);
			slot->reply = TSDG_REPLY_FAILED;
			slot->result_count = 0;
			strlcpy(slot->message, message, sizeof(slot->message));
			slot->state = TSDG_SLOT_ANSWERED;
			latch = slot->requester_latch;
		}
		SpinLockRelease(&slot->mutex);
		if (latch != NULL)
			SetLatch(latch);
	}
}
