/*
 * The GPU server: the process that owns the CUDA context. It is forked by the
 * supervisor background worker (tsdgworker.c) and is not itself a PostgreSQL
 * backend: it has no PGPROC, takes no LWLock and runs no transaction. It
 * sees the request slots in shared memory (tsdgipc.h), maps the sessions' DSM
 * segments by handle, and answers:
 *
 *   searches  every query waiting in any slot is taken as one batch (after up
 *             to tsdg.batch_wait_us for the sessions that were active lately),
 *             grouped by index and settings, and searched with one call per
 *             group, so the backend picks its small- or large-batch kernel
 *             from the batch size (tsdgserversearch.c);
 *   batches   the queries of a SQL batch search, searched a part at a time,
 *             the running batches taking turns and the requests queued
 *             meanwhile taken between two parts, so that one large batch
 *             neither holds the others up nor outlives its session's cancel
 *             (tsdgserverbatch.c);
 *   loads     an index image shipped by a session becomes a resident index,
 *             keyed by (database, relfilenode, graph_version, deleted count,
 *             last merge), evicted least recently used under
 *             tsdg.gpu_memory_limit (tsdgservercache.c);
 *   builds    GNND and both diversification stages on the device, with the
 *             session's cancel flag polled; the fresh graph stays resident,
 *             its k-NN lists too (tsdgserverbuild.c); past the session's
 *             maintenance_work_mem the rows come and the graph goes back in
 *             parts through a smaller segment (tsdgserverparts.c);
 *   pending   the pending rows of a resident index, sent by the sessions as
 *             they find the worker's copy behind their metapage, kept on the
 *             device and searched exactly with every search that asks
 *             (tsdgservercache.c);
 *   merges    the pending rows of an index merged into its graph (GNND of
 *             the new rows, GGM, diversification on the device), the old
 *             graph taken from the resident copy when the session left it
 *             there; the merged graph is answered in the session's segment
 *             (the k-NN lists announced first, so that the session writes
 *             them while the search lists are diversified) and stays
 *             resident under the key the metapage gets at the switch
 *             (tsdgservermerge.c); past the session's maintenance_work_mem
 *             the data comes and the graph goes back in parts, as a
 *             build's (tsdgservermergeparts.c).
 *
 * Anything that fails is answered with a reply code, and the session falls
 * back to the CPU; the process only exits on shutdown or a fatal error, and
 * the supervisor restarts it. This file holds the process's start, its
 * request loop and what every kind of request uses (mapping a request's
 * segment, reply codes).
 */
#include "postgres.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/ps_status.h"
#include "utils/timestamp.h"

#include "tsdggpuserver.h"
#include "vector.h"

/* the sessions that submitted within this window are expected back soon */
#define TSDG_ACTIVE_WINDOW_US	10000

TsdgBackend *TsdgDeviceBackend = NULL;
static TimestampTz *last_taken;		/* per slot: when its last request was taken */
static int	ring_start = 0;
volatile sig_atomic_t TsdgServerShutdownRequested = false;

/* ---- signals ---- */

static void
TsdgServerSigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	TsdgServerShutdownRequested = true;
	(void) sem_post(&TsdgShared->wakeup);
	errno = save_errno;
}

double
TsdgSecondsSince(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000000.0;
}

/* ---- bulk segments ---- */
bool
TsdgMapBulk(const TsdgRequestSlot *request, BulkMapping *map)
{
	memset(map, 0, sizeof(BulkMapping));
	if (request->in_batch_area)
	{
		/* mapped since the worker started: nothing to attach */
		map->address = TsdgBatchAreaBase;
		map->size = TsdgShared->batch_area.size;
		return TsdgBatchAreaBase != NULL && map->size >= request->bulk_size &&
			((TsdgBulkHeader *) map->address)->total_size == request->bulk_size;
	}
	map->handle = request->bulk_handle;
	if (!dsm_impl_op(DSM_OP_ATTACH, map->handle, 0, &map->impl_private, &map->address,
					 &map->size, LOG))
		return false;
	if (map->size < request->bulk_size ||
		((TsdgBulkHeader *) map->address)->total_size != request->bulk_size)
	{
		(void) dsm_impl_op(DSM_OP_DETACH, map->handle, 0, &map->impl_private, &map->address,
						   &map->size, LOG);
		return false;
	}
	return true;
}

/*
 * Whether an array of bytes at offset lies inside the mapped segment, after
 * its header: sizes and offsets come from another process's shared memory
 * and are checked before the worker reads or writes through them.
 */
bool
TsdgBulkFits(const BulkMapping *map, Size offset, Size bytes)
{
	Size		total = ((const TsdgBulkHeader *) map->address)->total_size;

	return total <= map->size && offset >= sizeof(TsdgBulkHeader) && offset <= total &&
		bytes <= total - offset;
}

/*
 * Whether count elements of elem_size bytes at offset lie inside the mapped
 * segment (TsdgBulkFits, without overflow for any count); an array that is
 * absent (offset 0) passes only where it is optional.
 */
bool
TsdgBulkHasArray(const BulkMapping *map, Size offset, int64 count, Size elem_size, bool optional)
{
	Size		total = ((const TsdgBulkHeader *) map->address)->total_size;

	if (offset == 0)
		return optional;
	if (count < 0 || elem_size == 0 || (uint64) count > total / elem_size)
		return false;
	return TsdgBulkFits(map, offset, (Size) count * elem_size);
}

/*
 * Whether the rows, dimensions and list lengths of a graph a request
 * describes are within what an index may have: they size the arrays the
 * worker reads and writes, and come from another process's shared memory.
 */
bool
TsdgGraphSizesValid(int64 n, int dims, int degree, int build_k)
{
	return n >= 1 && n < (int64) TSDG_PENDING_ROW_ID && dims >= 1 && dims <= VECTOR_MAX_DIM &&
		degree >= TSDG_MIN_DEGREE && degree <= TSDG_MAX_DEGREE &&
		(build_k == 0 || (build_k >= TSDG_MIN_BUILD_K && build_k <= TSDG_MAX_BUILD_K));
}

void
TsdgUnmapBulk(BulkMapping *map)
{
	if (map->address == NULL || map->address == TsdgBatchAreaBase)
		return;
	(void) dsm_impl_op(DSM_OP_DETACH, map->handle, 0, &map->impl_private, &map->address,
					   &map->size, LOG);
}

TsdgReply
TsdgReplyOf(TsdgStatus status)
{
	switch (status)
	{
		case TSDG_OK:
			return TSDG_REPLY_OK;
		case TSDG_ERR_OUT_OF_MEMORY:
			return TSDG_REPLY_OUT_OF_MEMORY;
		case TSDG_ERR_CANCELLED:
			return TSDG_REPLY_CANCELLED;
		default:
			return TSDG_REPLY_FAILED;
	}
}

/* ---- the request loop ---- */

/*
 * Sleeps on the semaphore until deadline or a post. server_sleeping is set
 * first and the queue looked at after it (Dekker's pattern with
 * TsdgIpcSubmit): a request queued meanwhile is either seen here or posts.
 */
static void
SemWaitUntil(TimestampTz deadline, uint32 queued_enough)
{
	long		secs;
	int			usecs;
	struct timespec ts;

	pg_atomic_write_u32(&TsdgShared->server_sleeping, 1);
	pg_memory_barrier();
	if (pg_atomic_read_u32(&TsdgShared->queued) < queued_enough)
	{
		TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += secs;
		ts.tv_nsec += (long) usecs * 1000;
		if (ts.tv_nsec >= 1000000000L)
		{
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		while (sem_timedwait(&TsdgShared->wakeup, &ts) != 0 && errno == EINTR &&
			   !TsdgServerShutdownRequested)
			;
	}
	pg_atomic_write_u32(&TsdgShared->server_sleeping, 0);
}

void
TsdgServerNap(pg_atomic_uint64 *counter, uint64 target, int max_ms)
{
	struct timespec ts;

	pg_atomic_write_u32(&TsdgShared->server_sleeping, 1);
	pg_memory_barrier();
	if (pg_atomic_read_u64(counter) < target)
	{
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long) max_ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		(void) sem_timedwait(&TsdgShared->wakeup, &ts);
	}
	pg_atomic_write_u32(&TsdgShared->server_sleeping, 0);
}

/* how many sessions submitted lately: the batch waits for about that many */
static int
RecentlyActiveSessions(TimestampTz now)
{
	int			active = 0;

	for (int i = 0; i < TsdgShared->slot_count; i++)
		if (last_taken[i] != 0 && now - last_taken[i] < TSDG_ACTIVE_WINDOW_US)
			active++;
	return active;
}

/* a stat() of each resident index's file, at most once a second, busy or idle */
static void
DropGoneIndexesEverySecond(void)
{
	static TimestampTz last_check = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(last_check, now, 1000))
		return;
	last_check = now;
	TsdgDropGoneIndexes();
}

/*
 * Waits for the first request, then up to tsdg.batch_wait_us while fewer
 * requests are queued than sessions were active lately.
 */
static void
WaitForBatch(void)
{
	TimestampTz deadline;
	int			expected;

	while (pg_atomic_read_u32(&TsdgShared->queued) == 0 && !TsdgServerShutdownRequested)
	{
		SemWaitUntil(TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000), 1);
		/* idle: the device's memory may have changed under other processes */
		if (TsdgDeviceBackend != NULL && pg_atomic_read_u32(&TsdgShared->queued) == 0)
			TsdgPublishDeviceMemory();
		DropGoneIndexesEverySecond();
		TsdgReleaseIdleHostArrays();
	}
	if (TsdgServerShutdownRequested || TsdgShared->batch_wait_us <= 0)
		return;

	expected = RecentlyActiveSessions(GetCurrentTimestamp());
	deadline = GetCurrentTimestamp() + TsdgShared->batch_wait_us;
	while ((int) pg_atomic_read_u32(&TsdgShared->queued) < expected &&
		   GetCurrentTimestamp() < deadline && !TsdgServerShutdownRequested)
		SemWaitUntil(deadline, (uint32) expected);
}

static void
ServeBatch(TakenRequest *taken)
{
	int			ntaken = 0;
	int			nslots = TsdgShared->slot_count;
	TimestampTz now = GetCurrentTimestamp();

	/* drain the wake-ups counted so far: the scan below sees their requests */
	while (sem_trywait(&TsdgShared->wakeup) == 0)
		;

	for (int n = 0; n < nslots; n++)
	{
		int			i = (ring_start + n) % nslots;
		TsdgRequestSlot *slot = &TsdgShared->slots[i];
		TakenRequest *t = &taken[ntaken];

		if (slot->state != TSDG_SLOT_QUEUED)
			continue;
		if (!TsdgIpcTake(slot, &t->copy, t->query))
			continue;
		t->slot = slot;
		t->done = false;
		last_taken[i] = now;
		ntaken++;
	}
	ring_start = (ring_start + 1) % nslots;

	/* pending rows first: their sessions search next */
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_PENDING_ROWS)
			TsdgServePendingRows(&taken[i]);
	/* searches, so that a build in the same batch does not delay them */
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_SEARCH)
			TsdgServeSearchGroup(taken, ntaken, i);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_SEARCH_BATCH)
			TsdgStartSearchBatch(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_LOAD_INDEX)
			TsdgServeLoad(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_BUILD)
			TsdgServeBuild(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_MERGE)
			TsdgServeMerge(&taken[i]);
}

/* Becomes a process of its own: no PGPROC, no exit callbacks of the supervisor. */
static void
DetachFromSupervisor(pid_t supervisor)
{
	MyProcPid = getpid();
	MyStartTime = time(NULL);
	on_exit_reset();
	MyProc = NULL;

	/* die with the supervisor, which dies with the postmaster */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != supervisor)
		_exit(1);

	pqsignal(SIGTERM, TsdgServerSigterm);
	pqsignal(SIGINT, SIG_IGN);
	pqsignal(SIGHUP, SIG_IGN);
	pqsignal(SIGUSR1, SIG_IGN);
	pqsignal(SIGUSR2, SIG_IGN);
	pqsignal(SIGCHLD, SIG_DFL);

	init_ps_display("pg_tsdg GPU worker");
}

/* which metrics the backend computes, for the sessions (TsdgWorkerComputes) */
static void
PublishMetrics(void)
{
	uint32		metrics = 0;

	for (int metric = TSDG_METRIC_L2; metric <= TSDG_METRIC_L1; metric++)
		if (tsdg_backend_computes(TsdgDeviceBackend, (TsdgMetric) metric))
			metrics |= 1u << metric;
	pg_atomic_write_u32(&TsdgShared->metrics, metrics);
}

static void
LoadDevice(void)
{
	char		path[MAXPGPATH];
	TsdgError	error;

	if (tsdg_worker_backend == TSDG_WORKER_BACKEND_CPU)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker started with the CPU backend (tsdg.worker_backend = cpu)")));
		PublishMetrics();
		TsdgIpcSetServerState(TSDG_SERVER_READY, "cpu", "");
		return;
	}

	snprintf(path, sizeof(path), "%s/pg_tsdg_cuda.so", pkglib_path);
	TsdgDeviceBackend = tsdg_backend_load(path, tsdg_gpu_device_number, &error);
	if (TsdgDeviceBackend == NULL)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker found no GPU: %s", error.message),
				 errdetail("Index builds and searches run on the CPU.")));
		TsdgIpcSetServerState(TSDG_SERVER_NO_DEVICE, "", error.message);
		proc_exit(0);
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker started on %s (device %d)",
					tsdg_backend_name(TsdgDeviceBackend), tsdg_gpu_device_number)));
	if (TsdgBatchAreaBase != NULL &&
		tsdg_backend_pin_host_memory(TsdgDeviceBackend, TsdgBatchAreaBase,
									 TsdgShared->batch_area.size, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not page-lock the batch area: %s", error.message),
				 errdetail("Batches are copied to the GPU through a staging buffer.")));
	TsdgPublishDeviceMemory();
	PublishMetrics();
	TsdgIpcSetServerState(TSDG_SERVER_READY, tsdg_backend_name(TsdgDeviceBackend), "");
}

void
TsdgGpuServerMain(void)
{
	TakenRequest *taken;
	pid_t		supervisor = getppid();

	DetachFromSupervisor(supervisor);
	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->server_pid = MyProcPid;
	SpinLockRelease(&TsdgShared->mutex);

	LoadDevice();

	last_taken = palloc0(sizeof(TimestampTz) * TsdgShared->slot_count);
	taken = palloc(sizeof(TakenRequest) * TsdgShared->slot_count);
	for (int i = 0; i < TsdgShared->slot_count; i++)
		taken[i].query = palloc(sizeof(float) * TSDG_SLOT_MAX_DIMS);

	while (!TsdgServerShutdownRequested)
	{
		/* a batch searched in parts: the requests queued meanwhile are taken between two */
		if (!TsdgSearchBatchesRunning())
			WaitForBatch();
		if (TsdgServerShutdownRequested)
			break;
		ServeBatch(taken);
		TsdgContinueSearchBatches();
		/* also when searches keep the worker busy: spares are a merge's, not theirs */
		TsdgReleaseIdleHostArrays();
		DropGoneIndexesEverySecond();
	}

	TsdgFailSearchBatches("the GPU worker is shutting down");
	TsdgEvictAll("shutting down");
	if (TsdgDeviceBackend != NULL)
		tsdg_backend_free(TsdgDeviceBackend);
	TsdgIpcSetServerState(TSDG_SERVER_STOPPED, NULL, NULL);
	proc_exit(0);
}
