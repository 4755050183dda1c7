/*
 * What a session hands to the GPU worker (runs in the sessions, never in the
 * worker): one search (tsdgoffloadsearch.c), a batch of searches
 * (tsdgoffloadbatch.c), an index image for the worker to keep resident
 * (tsdgoffloadimage.c), a build (tsdgoffloadbuild.c), a merge
 * (tsdgoffloadmerge.c). Every call returns false where the session should do
 * the work on the CPU instead, so a worker that is missing, busy, slow, out
 * of memory or killed costs a query a CPU search, never a wrong answer or an
 * error. This file holds what every kind of request uses: whether the worker
 * takes requests, the fallbacks' accounting, the key of an index's graph and
 * the shared memory segments that carry a request's data.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/backendid.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
#include "utils/rel.h"
#include "utils/resowner.h"

#include "tsdgoffload.h"

/* how often a session waiting for a busy worker looks at its state again */
#define TSDG_BUSY_POLL_MS 10

static bool fallback_logged[TSDG_FALLBACK_KINDS];

void
TsdgCountFallback(void)
{
	pg_atomic_fetch_add_u64(&TsdgShared->fallbacks, 1);
}

void
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

bool
TsdgWorkerComputes(TsdgMetric metric, bool fallback)
{
	char		detail[160];

	if (!TsdgIpcIsAvailable())
		return false;
	if (pg_atomic_read_u32(&TsdgShared->metrics) & (1u << metric))
		return true;
	if (!fallback)
		return false;
	snprintf(detail, sizeof(detail), "the worker's backend does not compute %s distances",
			 TsdgMetricName(metric));
	TsdgLogFallback(TSDG_FALLBACK_METRIC, "an index of a metric the worker does not compute runs",
					detail);
	return false;
}

/*
 * TsdgWorkerUsable() for a request: a worker that exists but cannot take it
 * now (restarting after a crash, busy with a build or a load) counts as a
 * fallback, since the session does on the CPU what the worker would have done.
 */
bool
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

/*
 * TsdgWorkerTakesRequest() for a build or a merge, which first waits while
 * the worker is busy (building another index, or loading one): the GPU
 * finishes that and this one sooner than the session's CPU would finish this
 * one alone. A worker that dies meanwhile leaves the busy state, so the wait
 * ends; it takes cancels and statement_timeout.
 */
bool
TsdgWorkerAwaitRequest(void)
{
	while (TsdgIpcIsAvailable() && tsdg_device != TSDG_DEVICE_CPU &&
		   MyBackendId != InvalidBackendId && TsdgIpcServerState() == TSDG_SERVER_BUSY)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, TSDG_BUSY_POLL_MS,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return TsdgWorkerTakesRequest();
}

/*
 * Whether a search of ef and k (a batch's k when batch) is within what the
 * worker takes from a session (tsdg.worker_max_ef_search, tsdg.worker_max_k);
 * a wider one runs on the CPU in the session, which says so once.
 */
bool
TsdgWorkerTakesWidth(int ef, int k, bool batch)
{
	char		detail[160];

	if (Max(ef, k) > tsdg_worker_max_ef_search)
		snprintf(detail, sizeof(detail), "ef %d is above tsdg.worker_max_ef_search (%d)",
				 Max(ef, k), tsdg_worker_max_ef_search);
	else if (batch && k > tsdg_worker_max_k)
		snprintf(detail, sizeof(detail), "k %d is above tsdg.worker_max_k (%d)", k,
				 tsdg_worker_max_k);
	else
		return true;
	TsdgLogFallback(TSDG_FALLBACK_TOO_WIDE, "a search too wide for the shared GPU worker runs",
					detail);
	return false;
}

void
TsdgIndexKeyOf(Relation index, const TsdgMetaPageData *meta, TsdgIndexKey *key)
{
	memset(key, 0, sizeof(TsdgIndexKey));
	key->database = MyDatabaseId;
	key->tablespace = index->rd_node.spcNode;
	key->relfilenode = index->rd_node.relNode;
	key->backend = index->rd_backend;
	key->graph_version = meta->graph_version;
	key->deleted_count = meta->deleted_count;
	key->node_count = meta->node_count;
	key->last_merge = meta->last_merge;
}

/*
 * A DSM segment of size bytes owned by the current resource owner, or NULL
 * when none can be had; *failure (when not NULL) then says why, NULL for
 * too many segments in use.
 */
dsm_segment *
TsdgTryCreateSegment(Size size, char **failure)
{
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner owner = ResourceOwnerCreate(CurrentResourceOwner, "pg_tsdg bulk segment");
	MemoryContext ctx = CurrentMemoryContext;
	dsm_segment *seg = NULL;

	if (failure != NULL)
		*failure = NULL;
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
		if (failure != NULL)
			*failure = edata->message;
		seg = NULL;
	}
	PG_END_TRY();
	CurrentResourceOwner = saved_owner;
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_BEFORE_LOCKS, false, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_LOCKS, false, false);
	ResourceOwnerRelease(owner, RESOURCE_RELEASE_AFTER_LOCKS, false, false);
	ResourceOwnerDelete(owner);

	if (seg == NULL)
		return NULL;
	/* from here on an error anywhere releases the segment with the transaction */
	dsm_unpin_mapping(seg);
	return seg;
}

/*
 * TsdgTryCreateSegment, with a WARNING that says what to raise when it
 * fails: containers often cap /dev/shm far below what an index or a build
 * needs.
 */
dsm_segment *
TsdgCreateBulkSegment(Size size, const char *what)
{
	char	   *failure;
	dsm_segment *seg = TsdgTryCreateSegment(size, &failure);

	if (seg == NULL)
		ereport(WARNING,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a %zu MB shared memory segment for %s; working on the CPU instead",
						(size >> 20) + 1, what),
				 errdetail("%s", failure != NULL ? failure : "Too many dynamic shared memory segments are in use."),
				 errhint("The GPU worker receives bulk data in dynamic shared memory: make /dev/shm larger than %zu MB (docker run --shm-size, a Kubernetes emptyDir with medium Memory), or set tsdg.device = cpu.",
						 (size >> 20) + 1)));
	return seg;
}

pid_t
TsdgServerPid(void)
{
	pid_t		pid;

	SpinLockAcquire(&TsdgShared->mutex);
	pid = TsdgShared->server_pid;
	SpinLockRelease(&TsdgShared->mutex);
	return pid;
}
