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
 *             from the batch size;
 *   loads     an index image shipped by a session becomes a resident index,
 *             keyed by (database, relfilenode, graph_version, deleted count,
 *             last merge), evicted least recently used under
 *             tsdg.gpu_memory_limit;
 *   builds    GNND and both diversification stages on the device, with the
 *             session's cancel flag polled; the fresh graph stays resident,
 *             its k-NN lists too;
 *   pending   the pending rows of a resident index, sent by the sessions as
 *             they find the worker's copy behind their metapage, kept on the
 *             device and searched exactly with every search that asks;
 *   merges    the pending rows of an index merged into its graph (GNND of
 *             the new rows, GGM, diversification on the device), the old
 *             graph taken from the resident copy when the session left it
 *             there; the merged graph is answered in the session's segment
 *             (the k-NN lists announced first, so that the session writes
 *             them while the search lists are diversified) and stays
 *             resident under the key the metapage gets at the switch.
 *
 * Anything that fails is answered with a reply code, and the session falls
 * back to the CPU; the process only exits on shutdown or a fatal error, and
 * the supervisor restarts it.
 */
#include "postgres.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/float.h"
#include "utils/ps_status.h"
#include "utils/timestamp.h"

#include "tsdgipc.h"
#include "tsdgworker.h"

/* the sessions that submitted within this window are expected back soon */
#define TSDG_ACTIVE_WINDOW_US	10000
/* a load promised to a session expires if it never arrives */
#define TSDG_LOAD_PROMISE_US	(60 * 1000000L)
#define TSDG_MAX_PROMISES		16
/* batches of SQL batch searches this large get a LOG line with their time */
#define TSDG_LOGGED_BATCH		1000

/* ---- bulk segments ---- */

typedef struct BulkMapping
{
	dsm_handle	handle;
	void	   *impl_private;
	void	   *address;
	Size		size;
} BulkMapping;

static bool
MapBulk(const TsdgRequestSlot *request, BulkMapping *map)
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

static void
UnmapBulk(BulkMapping *map)
{
	if (map->address == NULL || map->address == TsdgBatchAreaBase)
		return;
	(void) dsm_impl_op(DSM_OP_DETACH, map->handle, 0, &map->impl_private, &map->address,
					   &map->size, LOG);
}

typedef struct ResidentIndex
{
	bool		used;
	TsdgIndexKey key;
	TsdgResidentIndex *index;
	int64		n;
	int			dims;
	TsdgMetric	metric;
	ItemPointerData *tids;		/* n, for batch answers */
	uint8	   *flags;			/* n node flags, NULL when none is deleted */
	/*
	 * host arrays: the rows and the search graph, which the search index
	 * reads (the CPU's searches, the GPU's entry points), and for the next
	 * merge the k-NN lists when the worker built or merged the graph itself
	 * (knn_ids NULL for a shipped image)
	 */
	float	   *rows;
	uint32	   *neighbors;
	uint8	   *lambdas;
	int			degree;
	uint32	   *knn_ids;
	int			knn_k;
	/* the request's segment the arrays above lie in; address NULL: malloc'd copies */
	BulkMapping segment;
	/* rows and knn_ids where they are the worker's own (TsdgTakeHostArray), or NULL */
	float	   *owned_rows;
	uint32	   *owned_knn_ids;
	/* the page-locked pages of knn_ids (the next merge uploads them), or NULL */
	void	   *pinned_lists;
	/*
	 * the index's pending rows at pending_epoch, in list order (NULL until a
	 * session sends some), with their heap TIDs (malloc'd)
	 */
	TsdgExactSet *pending;
	ItemPointerData *pending_tids;
	int64		pending_capacity;
	uint64		pending_epoch;
	BlockNumber pending_end_block;	/* where the last of them lies (TsdgPendingArgs) */
	int			pending_end_offset;
	/*
	 * the newest rows its searches do not reach (FindUnreached), ascending
	 * (malloc'd), and their rows, scored exactly for every search; NULL
	 * when none
	 */
	uint32	   *unreached;
	int64		unreached_count;
	TsdgExactSet *unreached_set;
	int64		bytes;
	TimestampTz loaded_at;
	TimestampTz last_used;
} ResidentIndex;

typedef struct LoadPromise
{
	TsdgIndexKey key;
	TimestampTz promised_at;
} LoadPromise;

/* a request taken out of its slot for this batch */
typedef struct TakenRequest
{
	TsdgRequestSlot *slot;
	TsdgRequestSlot copy;		/* without the payload */
	float	   *query;			/* inline searches */
	bool		done;
} TakenRequest;

static TsdgBackend *device_backend = NULL;	/* NULL: the core's CPU backend */
static ResidentIndex residents[TSDG_MAX_CACHED_INDEXES];
static LoadPromise promises[TSDG_MAX_PROMISES];
static TimestampTz *last_taken;		/* per slot: when its last request was taken */
static int	ring_start = 0;
static volatile sig_atomic_t shutdown_requested = false;

/* ---- signals ---- */

static void
TsdgServerSigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	shutdown_requested = true;
	(void) sem_post(&TsdgShared->wakeup);
	errno = save_errno;
}

static double
SecondsSince(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000000.0;
}

/* ---- the resident indexes ---- */

/* a resident index's memory: its graph's and its pending rows' copy */
static int64
ResidentBytes(const ResidentIndex *r)
{
	return r->bytes + (r->pending != NULL ? (int64) tsdg_exact_set_memory_bytes(r->pending) : 0);
}

/* the memory of every resident index */
static int64
ResidentBytesInAll(void)
{
	int64		used = 0;

	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		used += residents[i].used ? ResidentBytes(&residents[i]) : 0;
	return used;
}

static void
PublishResidents(void)
{
	int			count = 0;
	int64		used = 0;
	int64		pending_rows[TSDG_MAX_CACHED_INDEXES];
	int64		bytes[TSDG_MAX_CACHED_INDEXES];

	/* asked outside the spinlock: the GPU's copy takes a lock of its own */
	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
	{
		pending_rows[i] = residents[i].used && residents[i].pending != NULL ?
			tsdg_exact_set_size(residents[i].pending) : 0;
		bytes[i] = residents[i].used ? ResidentBytes(&residents[i]) : 0;
	}
	SpinLockAcquire(&TsdgShared->mutex);
	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
	{
		TsdgCachedIndexInfo *info;

		if (!residents[i].used)
			continue;
		info = &TsdgShared->cached[count++];
		info->key = residents[i].key;
		info->with_knn = residents[i].knn_ids != NULL;
		info->pending_rows = pending_rows[i];
		info->pending_epoch = residents[i].pending_epoch;
		info->pending_end_block = residents[i].pending_end_block;
		info->pending_end_offset = residents[i].pending_end_offset;
		info->bytes = bytes[i];
		info->loaded_at = residents[i].loaded_at;
		info->last_used = residents[i].last_used;
		used += info->bytes;
	}
	TsdgShared->cached_count = count;
	TsdgShared->memory_used = used;
	SpinLockRelease(&TsdgShared->mutex);
	if (device_backend != NULL)
		TsdgPublishDeviceMemory();
}

static ResidentIndex *
FindResident(const TsdgIndexKey *key)
{
	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		if (residents[i].used && TsdgIndexKeysEqual(&residents[i].key, key))
			return &residents[i];
	return NULL;
}

/* the host arrays of a resident index, and its slot cleared */
static void
ReleaseResidentArrays(ResidentIndex *r)
{
	TsdgError	error;

	if (r->pinned_lists != NULL &&
		tsdg_backend_unpin_host_memory(device_backend, r->pinned_lists, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not unlock the pages of a dropped index: %s",
						error.message)));
	TsdgGiveBackHostArray(r->owned_rows);
	TsdgGiveBackHostArray(r->owned_knn_ids);
	if (r->segment.address != NULL)
		UnmapBulk(&r->segment);
	else
	{
		free(r->tids);
		free(r->flags);
		if (r->rows != r->owned_rows)
			free(r->rows);
		free(r->neighbors);
		free(r->lambdas);
		if (r->knn_ids != r->owned_knn_ids)
			free(r->knn_ids);
	}
	if (r->pending != NULL)
		tsdg_exact_set_free(r->pending);
	free(r->pending_tids);
	if (r->unreached_set != NULL)
		tsdg_exact_set_free(r->unreached_set);
	free(r->unreached);
	memset(r, 0, sizeof(ResidentIndex));
}

static void
FreeResident(ResidentIndex *r, const char *why)
{
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: dropped index %u/%u version " UINT64_FORMAT " (%lld MB): %s",
					r->key.database, r->key.relfilenode, r->key.graph_version,
					(long long) (r->bytes >> 20), why)));
	tsdg_index_free(r->index);
	ReleaseResidentArrays(r);
}

static ResidentIndex *
LeastRecentlyUsed(void)
{
	ResidentIndex *lru = NULL;

	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		if (residents[i].used && (lru == NULL || residents[i].last_used < lru->last_used))
			lru = &residents[i];
	return lru;
}

/* Makes room for bytes more under tsdg.gpu_memory_limit and for a free entry. */
static void
EvictFor(int64 bytes)
{
	int64		limit = TsdgShared->memory_limit_bytes;
	int64		used = ResidentBytesInAll();
	bool		free_entry = false;

	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		free_entry |= !residents[i].used;
	while ((limit > 0 && used + bytes > limit) || !free_entry)
	{
		ResidentIndex *lru = LeastRecentlyUsed();

		if (lru == NULL)
			break;
		used -= ResidentBytes(lru);
		FreeResident(lru, "least recently used, to make room under tsdg.gpu_memory_limit");
		free_entry = true;
	}
}

static void
EvictAll(const char *why)
{
	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		if (residents[i].used)
			FreeResident(&residents[i], why);
	PublishResidents();
}

static int64
ResidentBytesEstimate(int64 n, int dims, int degree)
{
	/* the rows, the graph, and a heap TID and flags byte per node */
	return n * ((int64) sizeof(float) * dims + (int64) (sizeof(uint32) + sizeof(uint8)) * degree +
				(int64) sizeof(ItemPointerData) + 1);
}

static void *
CopyOut(const void *src, Size bytes)
{
	void	   *dst = malloc(Max(bytes, 1));

	if (dst != NULL && bytes > 0)
		memcpy(dst, src, bytes);
	return dst;
}

/*
 * Page-locks the pages of r's k-NN lists, which the next merge of the graph
 * uploads whole (0.5 GB at 2M rows): from pageable memory the GPU copies them
 * through a staging buffer. Failing only costs that speed.
 */
static void
PinResidentLists(ResidentIndex *r, Size bytes)
{
	uintptr_t	page = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t	start = (uintptr_t) r->knn_ids & ~(page - 1);
	uintptr_t	end = ((uintptr_t) r->knn_ids + bytes + page - 1) & ~(page - 1);
	TsdgError	error;

	if (bytes == 0)
		return;
	if (tsdg_backend_pin_host_memory(device_backend, (void *) start, end - start, &error) == TSDG_OK)
		r->pinned_lists = (void *) start;
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not page-lock a graph's k-NN lists: %s",
						error.message),
				 errdetail("The next merge of the graph uploads them through a staging buffer.")));
}

/* a graph to make resident (AddResident says who owns its arrays afterwards) */
typedef struct ResidentGraph
{
	const float *rows;
	int64		n;
	int			dims;
	TsdgMetric	metric;
	int			degree;
	const uint32 *neighbors;
	const uint8 *lambdas;
	const uint32 *knn_ids;		/* n * knn_k, or NULL */
	int			knn_k;
	const ItemPointerData *tids;
	const uint8 *flags;			/* NULL: none deleted */
	/* rows, knn_ids where they are the worker's own (TsdgTakeHostArray); or NULL */
	float	   *own_rows;
	uint32	   *own_knn_ids;
	/*
	 * the graph whose rows are the first same_rows_n of rows (a merge's old
	 * graph, when the worker's copy gave them), or NULL
	 */
	const TsdgIndexKey *same_rows_key;
	int64		same_rows_n;
} ResidentGraph;

/* the resident index g's first rows may be copied from, unless it was evicted meanwhile */
static const TsdgResidentIndex *
SameRowsIndex(const ResidentGraph *g)
{
	ResidentIndex *same = g->same_rows_key != NULL ? FindResident(g->same_rows_key) : NULL;

	return same != NULL && same->n == g->same_rows_n && same->dims == g->dims ? same->index : NULL;
}

/*
 * Makes graph g resident under key. The other graphs of the index are
 * dropped as stale, except keep (not NULL): the graph a merge read, which
 * searches use until the session switches the metapage to this one. When g's
 * arrays lie in the request's segment *map (a DSM segment, not the batch
 * area), the resident takes that mapping over instead of copying them (the
 * session's detach then leaves the memory to this process; on failure it is
 * released), and *map is cleared; else they are copied. Its own arrays
 * (own_rows, own_knn_ids) are taken over either way, and given back on
 * failure. On failure returns the status with error filled.
 */
static TsdgStatus
AddResident(const TsdgIndexKey *key, const ResidentGraph *g, const TsdgIndexKey *keep,
			BulkMapping *map, TsdgError *error)
{
	ResidentIndex *r = NULL;
	int64		n = g->n;
	int64		estimate = ResidentBytesEstimate(n, g->dims, g->degree);
	TimestampTz start = GetCurrentTimestamp();
	bool		any_deleted = false;
	ItemPointerData no_tid;

	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		if (residents[i].used && residents[i].key.database == key->database &&
			residents[i].key.relfilenode == key->relfilenode &&
			(keep == NULL || !TsdgIndexKeysEqual(&residents[i].key, keep)))
			FreeResident(&residents[i], "a newer graph of the index replaces it");
	EvictFor(estimate);
	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES && r == NULL; i++)
		if (!residents[i].used)
			r = &residents[i];
	Assert(r != NULL);

	memset(r, 0, sizeof(ResidentIndex));
	for (int64 i = 0; g->flags != NULL && i < n && !any_deleted; i++)
		any_deleted = (g->flags[i] & TSDG_NODE_DELETED) != 0;
	r->knn_k = g->knn_k;
	r->owned_rows = g->own_rows;
	r->owned_knn_ids = g->own_knn_ids;
	if (map != NULL && map->address != NULL && map->address != TsdgBatchAreaBase)
	{
		r->segment = *map;
		map->address = NULL;
		r->tids = (ItemPointerData *) g->tids;
		r->flags = any_deleted ? (uint8 *) g->flags : NULL;
		r->rows = (float *) g->rows;
		r->neighbors = (uint32 *) g->neighbors;
		r->lambdas = (uint8 *) g->lambdas;
		r->knn_ids = (uint32 *) g->knn_ids;
	}
	else
	{
		r->tids = CopyOut(g->tids, sizeof(ItemPointerData) * n);
		if (any_deleted)
			r->flags = CopyOut(g->flags, n);
		/* the GPU index reads the host rows when it picks its entry points */
		r->rows = g->own_rows != NULL ? g->own_rows : CopyOut(g->rows, sizeof(float) * n * g->dims);
		r->neighbors = CopyOut(g->neighbors, sizeof(uint32) * n * g->degree);
		r->lambdas = CopyOut(g->lambdas, n * g->degree);
		if (g->knn_ids != NULL)
			r->knn_ids = g->own_knn_ids != NULL ? g->own_knn_ids :
				CopyOut(g->knn_ids, sizeof(uint32) * n * g->knn_k);
	}
	if (r->tids == NULL || (any_deleted && r->flags == NULL) || r->rows == NULL ||
		r->neighbors == NULL || r->lambdas == NULL ||
		(g->knn_ids != NULL && r->knn_ids == NULL))
	{
		strlcpy(error->message, "out of host memory for the index copy", sizeof(error->message));
		ReleaseResidentArrays(r);
		return TSDG_ERR_OUT_OF_MEMORY;
	}

	r->index = tsdg_index_upload_after(device_backend, SameRowsIndex(g), r->rows, n, g->dims,
									   g->metric, r->neighbors, r->lambdas, g->degree, error);
	if (r->index == NULL && LeastRecentlyUsed() != NULL)
	{
		/* the device may be full of other indexes: drop them and try again */
		EvictAll("device out of memory for a new index");
		r->index = tsdg_index_upload_after(device_backend, SameRowsIndex(g), r->rows, n, g->dims,
										   g->metric, r->neighbors, r->lambdas, g->degree, error);
	}
	if (r->index == NULL)
	{
		ReleaseResidentArrays(r);
		return strstr(error->message, "memory") != NULL ? TSDG_ERR_OUT_OF_MEMORY : TSDG_ERR_DEVICE;
	}
	/* batches are answered with heap TIDs, mapped where the results are */
	ItemPointerSetInvalid(&no_tid);
	if (tsdg_index_set_payload(r->index, r->tids, sizeof(ItemPointerData), r->flags,
							   TSDG_NODE_DELETED, &no_tid, error) != TSDG_OK)
	{
		tsdg_index_free(r->index);
		r->index = NULL;
		ReleaseResidentArrays(r);
		return strstr(error->message, "memory") != NULL ? TSDG_ERR_OUT_OF_MEMORY : TSDG_ERR_DEVICE;
	}

	r->used = true;
	r->key = *key;
	r->n = n;
	r->dims = g->dims;
	r->metric = g->metric;
	r->degree = g->degree;
	r->bytes = (int64) tsdg_index_memory_bytes(r->index);
	r->loaded_at = r->last_used = GetCurrentTimestamp();
	PublishResidents();
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: loaded index %u/%u version " UINT64_FORMAT ": %lld rows of %d dimensions, %lld MB on %s in %.3f s",
					key->database, key->relfilenode, key->graph_version, (long long) n, g->dims,
					(long long) (r->bytes >> 20), tsdg_backend_name(device_backend),
					SecondsSince(start))));
	return TSDG_OK;
}

/*
 * Page-locks the k-NN lists of the graph the worker just built or merged,
 * which the next merge uploads: after the answer and the summary, as
 * locking half a gigabyte of pages takes a while.
 */
static void
PinListsOf(const TsdgIndexKey *key)
{
	ResidentIndex *r = FindResident(key);

	if (r != NULL && device_backend != NULL && r->knn_ids != NULL && r->pinned_lists == NULL)
		PinResidentLists(r, r->n * r->knn_k * sizeof(uint32));
}

/*
 * Once a search asks for r, the metapage has moved to it: older graphs of
 * its index that a merge kept for the searches meanwhile are dropped.
 */
static void
DropOlderGraphs(const ResidentIndex *r)
{
	bool		dropped = false;

	for (int i = 0; i < TSDG_MAX_CACHED_INDEXES; i++)
		if (residents[i].used && &residents[i] != r &&
			residents[i].key.database == r->key.database &&
			residents[i].key.relfilenode == r->key.relfilenode &&
			residents[i].key.graph_version < r->key.graph_version)
		{
			FreeResident(&residents[i], "the index moved on to a newer graph");
			dropped = true;
		}
	if (dropped)
		PublishResidents();
}

/* ---- load promises: one session ships a missing index, the others use the CPU ---- */

static bool
PromiseLoad(const TsdgIndexKey *key)
{
	TimestampTz now = GetCurrentTimestamp();
	LoadPromise *free_promise = NULL;

	for (int i = 0; i < TSDG_MAX_PROMISES; i++)
	{
		LoadPromise *p = &promises[i];

		if (p->promised_at != 0 && now - p->promised_at > TSDG_LOAD_PROMISE_US)
			p->promised_at = 0;
		if (p->promised_at != 0 && TsdgIndexKeysEqual(&p->key, key))
			return false;
		if (p->promised_at == 0 && free_promise == NULL)
			free_promise = p;
	}
	if (free_promise == NULL)
		return false;
	free_promise->key = *key;
	free_promise->promised_at = now;
	return true;
}

static void
ForgetPromise(const TsdgIndexKey *key)
{
	for (int i = 0; i < TSDG_MAX_PROMISES; i++)
		if (promises[i].promised_at != 0 && TsdgIndexKeysEqual(&promises[i].key, key))
			promises[i].promised_at = 0;
}

static TsdgReply
ReplyOf(TsdgStatus status)
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

/*
 * The rows [n - check->rows, n) of r, a merge's new rows, that its searches
 * at the check's ef do not reach: kept with r and scored exactly for every
 * search (MergeUnreachedIds, MergeUnreachedTids), so that a row just merged
 * is always found. With repair_changed (the merge's changed flags, whose
 * graph r holds), the graph is first repaired for them
 * (tsdg_index_unreached_rows_repaired): the lists it changes are marked
 * TSDG_CHANGED_REPAIR there, for the session to write again, even when it
 * fails. False, with none kept, when they could not be found.
 */
static bool
FindUnreached(ResidentIndex *r, const TsdgUnreachedCheck *check, uint8 *repair_changed,
			  TsdgError *error)
{
	int64		first = r->n - Min(check->rows, r->n);
	int64		count = 0;
	int64		found = 0;
	int64		lists_repaired = 0;
	uint32	   *ids;
	TimestampTz start = GetCurrentTimestamp();

	if (first == r->n)
		return true;
	ids = malloc(sizeof(uint32) * (r->n - first));
	if (ids == NULL)
	{
		strlcpy(error->message, "out of host memory", sizeof(error->message));
		return false;
	}
	if ((repair_changed == NULL ?
		 tsdg_index_unreached_rows(r->index, first, check->ef, check->lambda_limit, ids,
								   r->n - first, &count, error) :
		 tsdg_index_unreached_rows_repaired(r->index, r->rows, r->neighbors, r->lambdas, r->degree,
											r->metric, first, check->ef, check->lambda_limit, ids,
											r->n - first, &count, &found, repair_changed,
											&lists_repaired, error)) != TSDG_OK)
	{
		free(ids);
		return false;
	}
	if (count > 0)
	{
		float	   *rows = malloc(sizeof(float) * r->dims * count);
		bool		kept = false;

		if (rows == NULL)
			strlcpy(error->message, "out of host memory", sizeof(error->message));
		else
		{
			for (int64 i = 0; i < count; i++)
				memcpy(rows + i * r->dims, r->rows + (Size) ids[i] * r->dims,
					   sizeof(float) * r->dims);
			r->unreached_set = tsdg_exact_set_create(device_backend, r->dims, r->metric, error);
			kept = r->unreached_set != NULL &&
				tsdg_exact_set_append(r->unreached_set, rows, count, error) == TSDG_OK;
			free(rows);
		}
		if (!kept)
		{
			if (r->unreached_set != NULL)
				tsdg_exact_set_free(r->unreached_set);
			r->unreached_set = NULL;
			free(ids);
			return false;
		}
	}
	r->unreached = ids;
	r->unreached_count = count;
	if (repair_changed != NULL)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: %lld of the last %lld rows of index %u/%u version " UINT64_FORMAT " are not reached by the walk for their own vector at ef %d (the large-batch kernel's, or the CPU's); %lld lists given an edge into those and the rows a walk at ef %d misses, then %lld not reached by a search, searched exactly (%.3f s)",
						(long long) found, (long long) (r->n - first), r->key.database,
						r->key.relfilenode, r->key.graph_version, check->ef,
						(long long) lists_repaired, Min(check->ef, TSDG_REPAIR_NARROW_EF),
						(long long) count, SecondsSince(start))));
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: %lld of the last %lld rows of index %u/%u version " UINT64_FORMAT " are not reached by a search for their own vector at ef %d, searched exactly (%.3f s)",
						(long long) count, (long long) (r->n - first), r->key.database,
						r->key.relfilenode, r->key.graph_version, check->ef, SecondsSince(start))));
	return true;
}

/*
 * The nq queries' exact nearest unreached rows of r (uk each, positions into
 * r->unreached) into *positions and *dists, which it pallocs.
 */
static TsdgStatus
SearchUnreached(const ResidentIndex *r, const float *queries, int nq, int uk,
				uint32 **positions, float **dists, TsdgError *error)
{
	*positions = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * uk * (Size) nq);
	*dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * uk * (Size) nq);
	return tsdg_exact_set_search(r->unreached_set, queries, nq, uk, *positions, *dists, error);
}

/*
 * Up to this many distances (queries times unreached rows) the worker scores
 * the unreached rows on its own thread: a search of an index with 313 of them
 * took 0.36 ms through the device's exact set and 0.28 ms without them (one
 * session, H100; docs/benchmarks.md), the set's launch and top-k selection
 * costing more than the distances.
 */
#define TSDG_HOST_UNREACHED_WORK	2048

/*
 * One query's unreached rows of r nearer than bound (its k-th graph
 * result), at most k of them, ascending, scored on this thread into hit_ids
 * and hit_dists; returns how many. scratch: r->unreached_count entries.
 */
static int
NearUnreachedOnHost(const ResidentIndex *r, const float *query, int k, float bound,
					uint32 *hit_ids, float *hit_dists, TsdgCandidate *scratch)
{
	int			near = 0;

	for (int64 i = 0; i < r->unreached_count; i++)
	{
		uint32		node = r->unreached[i];
		float		d = tsdg_metric_distance(r->metric, query, r->rows + (Size) node * r->dims,
											 r->dims);

		if (d < bound)
		{
			scratch[near].distance = d;
			scratch[near++].id = node;
		}
	}
	qsort(scratch, near, sizeof(TsdgCandidate), TsdgCompareCandidates);
	near = Min(near, k);
	for (int i = 0; i < near; i++)
	{
		hit_ids[i] = scratch[i].id;
		hit_dists[i] = scratch[i].distance;
	}
	return near;
}

/*
 * r's unreached rows merged into nq queries' k graph results (node ids), a
 * node once: on this thread for a few queries, else by the device's exact set.
 */
static TsdgStatus
MergeUnreachedIds(const ResidentIndex *r, const float *queries, int nq, int k, uint32 *ids,
				  float *dists, TsdgError *error)
{
	int			uk = (int) Min(k, r->unreached_count);
	bool		on_host = (int64) nq * r->unreached_count <= TSDG_HOST_UNREACHED_WORK;
	uint32	   *positions = NULL;
	float	   *device_dists = NULL;
	uint32	   *hit_ids;
	float	   *hit_dists;
	TsdgCandidate *scratch = NULL;
	uint32	   *scratch_ids;
	float	   *scratch_dists;
	uint32		missing = TSDG_INVALID_ID;
	TsdgStatus	status = TSDG_OK;

	if (uk == 0 || nq == 0)
		return TSDG_OK;
	if (on_host)
		scratch = palloc(sizeof(TsdgCandidate) * r->unreached_count);
	else
		status = SearchUnreached(r, queries, nq, uk, &positions, &device_dists, error);
	hit_ids = palloc(sizeof(uint32) * uk);
	hit_dists = palloc(sizeof(float) * uk);
	scratch_ids = palloc(sizeof(uint32) * k);
	scratch_dists = palloc(sizeof(float) * k);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		uint32	   *qids = ids + (Size) q * k;
		float	   *qdists = dists + (Size) q * k;
		int			hits = uk;

		if (on_host)
			hits = NearUnreachedOnHost(r, queries + (Size) q * r->dims, uk, qdists[k - 1],
									   hit_ids, hit_dists, scratch);
		else
			for (int j = 0; j < uk; j++)
			{
				uint32		position = positions[(Size) q * uk + j];

				hit_ids[j] = position == TSDG_INVALID_ID ? TSDG_INVALID_ID : r->unreached[position];
				hit_dists[j] = device_dists[(Size) q * uk + j];
			}
		TsdgMergeExactHits(k, qids, qdists, sizeof(uint32), &missing, hit_ids, hit_dists, hits,
						   scratch_ids, scratch_dists);
	}
	if (positions != NULL)
	{
		pfree(positions);
		pfree(device_dists);
	}
	if (scratch != NULL)
		pfree(scratch);
	pfree(hit_ids);
	pfree(hit_dists);
	pfree(scratch_ids);
	pfree(scratch_dists);
	return status;
}

/*
 * r's unreached rows merged into a batch's answers (heap TIDs, k per query,
 * deleted nodes left out), a row once.
 */
static TsdgStatus
MergeUnreachedTids(const ResidentIndex *r, const float *queries, int nq, int k,
				   ItemPointerData *tids, float *dists, TsdgError *error)
{
	int			uk = (int) Min(k, r->unreached_count);
	uint32	   *positions;
	float	   *hit_dists;
	ItemPointerData *hit_tids;
	ItemPointerData *scratch_tids;
	float	   *scratch_dists;
	ItemPointerData missing;
	TsdgStatus	status;

	if (uk == 0 || nq == 0)
		return TSDG_OK;
	ItemPointerSetInvalid(&missing);
	status = SearchUnreached(r, queries, nq, uk, &positions, &hit_dists, error);
	hit_tids = palloc(sizeof(ItemPointerData) * uk);
	scratch_tids = palloc(sizeof(ItemPointerData) * k);
	scratch_dists = palloc(sizeof(float) * k);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		const uint32 *qpos = positions + (Size) q * uk;
		float	   *qdists = hit_dists + (Size) q * uk;
		int			hits = 0;

		for (int j = 0; j < uk && qpos[j] != TSDG_INVALID_ID; j++)
		{
			uint32		node = r->unreached[qpos[j]];

			if (r->flags != NULL && (r->flags[node] & TSDG_NODE_DELETED) != 0)
				continue;
			hit_tids[hits] = r->tids[node];
			qdists[hits++] = qdists[j];
		}
		TsdgMergeExactHits(k, tids + (Size) q * k, dists + (Size) q * k, sizeof(ItemPointerData),
						   &missing, hit_tids, qdists, hits, scratch_tids, scratch_dists);
	}
	pfree(positions);
	pfree(hit_dists);
	pfree(hit_tids);
	pfree(scratch_tids);
	pfree(scratch_dists);
	return status;
}

/* ---- searches ---- */

/*
 * The pending rows an index scan's round gets at most: the nearest of them,
 * with the distance past which the scan reads the rest itself
 * (TsdgTakeOverPending). A LIMIT up to this never does; a smaller k makes the
 * brute force cheaper (0.17 ms at k 10 against 0.35 ms at k 100 for one
 * query over 100k rows on an H100).
 */
#define TSDG_PENDING_ROUND_ROWS	32

/* true when the worker's copy of r's pending rows is the one args's metapage has, or more */
static bool
PendingCopyCovers(const ResidentIndex *r, const TsdgSearchArgs *args)
{
	return args->pending_rows > 0 && args->k <= TSDG_EXACT_SET_MAX_K && r->pending != NULL &&
		args->pending_epoch == r->pending_epoch &&
		tsdg_exact_set_size(r->pending) >= args->pending_rows;
}

/*
 * The k nearest of one query's graph results (graph_count of them, with
 * their TIDs; ids may be NULL) and of its pending_k nearest pending rows
 * (positions into r's copy, TSDG_INVALID_ID padded), into out_*; out_ids may
 * be NULL. Returns how many results were written.
 */
static int
MergePendingResults(const ResidentIndex *r, int k, int graph_count, const float *graph_dists,
					const uint32 *graph_ids, const ItemPointerData *graph_tids, int pending_k,
					const uint32 *pending_pos, const float *pending_dists,
					float *out_dists, uint32 *out_ids, ItemPointerData *out_tids)
{
	int			g = 0,
				p = 0,
				out = 0;

	while (out < k)
	{
		bool		pending_left = p < pending_k && pending_pos[p] != TSDG_INVALID_ID;

		if (pending_left && (g >= graph_count || pending_dists[p] < graph_dists[g]))
		{
			out_dists[out] = pending_dists[p];
			if (out_ids != NULL)
				out_ids[out] = TSDG_PENDING_ROW_ID;
			out_tids[out] = r->pending_tids[pending_pos[p]];
			p++;
		}
		else if (g < graph_count)
		{
			out_dists[out] = graph_dists[g];
			if (out_ids != NULL)
				out_ids[out] = graph_ids[g];
			out_tids[out] = graph_tids[g];
			g++;
		}
		else
			break;
		out++;
	}
	return out;
}

/*
 * Answers every search in taken[] that shares the first one's index and
 * settings with one search call, and one search of the pending rows for
 * those whose metapage has no pending row the worker lacks.
 */
static void
ServeSearchGroup(TakenRequest *taken, int ntaken, int first)
{
	const TsdgSearchArgs *args = &taken[first].copy.args.search;
	int		   *members = palloc(sizeof(int) * ntaken);
	int			nq = 0;
	ResidentIndex *r = FindResident(&args->key);
	int			k = Min(args->k, TSDG_SLOT_MAX_RESULTS);

	for (int i = first; i < ntaken; i++)
	{
		const TsdgSearchArgs *other = &taken[i].copy.args.search;

		if (taken[i].done || taken[i].copy.kind != TSDG_REQUEST_SEARCH ||
			!TsdgIndexKeysEqual(&other->key, &args->key) || other->k != args->k ||
			other->ef != args->ef || other->lambda_limit != args->lambda_limit ||
			other->dims != args->dims)
			continue;
		members[nq++] = i;
		taken[i].done = true;
	}

	if (r == NULL || r->dims != args->dims)
	{
		/* the first asker ships the index; the others search on the CPU meanwhile */
		bool		promised = r == NULL && PromiseLoad(&args->key);

		for (int m = 0; m < nq; m++)
		{
			TakenRequest *t = &taken[members[m]];

			TsdgIpcAnswer(t->slot, t->copy.request_id,
						  m == 0 && promised ? TSDG_REPLY_NEED_INDEX : TSDG_REPLY_NOT_RESIDENT,
						  0, NULL, NULL, NULL, 0, NULL);
		}
	}
	else
	{
		float	   *queries = palloc(sizeof(float) * args->dims * nq);
		uint32	   *ids = palloc(sizeof(uint32) * k * nq);
		float	   *dists = palloc(sizeof(float) * k * nq);
		ItemPointerData *tids = palloc(sizeof(ItemPointerData) * k);
		uint32	   *pending_pos = NULL;
		float	   *pending_dists = NULL;
		uint32	   *out_ids = palloc(sizeof(uint32) * k);
		float	   *out_dists = palloc(sizeof(float) * k);
		ItemPointerData *out_tids = palloc(sizeof(ItemPointerData) * k);
		int			pending_k = Min(k, TSDG_PENDING_ROUND_ROWS);
		TsdgError	error;
		TsdgStatus	status;

		for (int m = 0; m < nq; m++)
			memcpy(queries + (Size) m * args->dims, taken[members[m]].query,
				   sizeof(float) * args->dims);
		DropOlderGraphs(r);
		r->last_used = GetCurrentTimestamp();
		status = tsdg_index_search(r->index, queries, nq, k, Max(args->ef, k),
								   args->lambda_limit, ids, dists, &error);
		if (status == TSDG_OK)
			status = MergeUnreachedIds(r, queries, nq, k, ids, dists, &error);
		for (int m = 0; m < nq && status == TSDG_OK; m++)
			if (PendingCopyCovers(r, &taken[members[m]].copy.args.search))
			{
				pending_pos = palloc(sizeof(uint32) * pending_k * nq);
				pending_dists = palloc(sizeof(float) * pending_k * nq);
				status = tsdg_exact_set_search(r->pending, queries, nq, pending_k, pending_pos,
											   pending_dists, &error);
				break;
			}
		for (int m = 0; m < nq; m++)
		{
			TakenRequest *t = &taken[members[m]];
			const uint32 *qids = ids + (Size) m * k;
			bool		with_pending = status == TSDG_OK && pending_pos != NULL &&
				PendingCopyCovers(r, &t->copy.args.search);
			int			count = 0;

			if (status == TSDG_OK)
				while (count < k && qids[count] != TSDG_INVALID_ID && qids[count] < r->n)
				{
					tids[count] = r->tids[qids[count]];
					if (r->flags != NULL && (r->flags[qids[count]] & TSDG_NODE_DELETED) != 0)
						ItemPointerSetInvalid(&tids[count]);
					count++;
				}
			if (with_pending)
			{
				const uint32 *qpos = pending_pos + (Size) m * pending_k;
				const float *qdists = pending_dists + (Size) m * pending_k;
				/* a full list may leave out rows as near as its last */
				float		bound = qpos[pending_k - 1] != TSDG_INVALID_ID ?
					qdists[pending_k - 1] : get_float4_infinity();

				count = MergePendingResults(r, k, count, dists + (Size) m * k, qids, tids,
											pending_k, qpos, qdists, out_dists, out_ids, out_tids);
				TsdgIpcAnswerSearch(t->slot, t->copy.request_id, TSDG_REPLY_OK, count,
									out_dists, out_ids, out_tids, k, true, bound, NULL);
			}
			else
				TsdgIpcAnswer(t->slot, t->copy.request_id, ReplyOf(status), count,
							  dists + (Size) m * k, qids, tids, k,
							  status == TSDG_OK ? NULL : error.message);
		}
		pg_atomic_fetch_add_u64(&TsdgShared->batches, 1);
		pg_atomic_fetch_add_u64(&TsdgShared->batched_queries, nq);
		pfree(queries);
		pfree(ids);
		pfree(dists);
		pfree(tids);
		pfree(out_ids);
		pfree(out_dists);
		pfree(out_tids);
		if (pending_pos != NULL)
		{
			pfree(pending_pos);
			pfree(pending_dists);
		}
	}
	pfree(members);
}

/*
 * The pending rows' k nearest merged into a batch's answers (tids, dists:
 * nq * k in the segment, the graph's nearest first, invalid TIDs after the
 * last).
 */
static TsdgStatus
MergePendingIntoBatch(const ResidentIndex *r, const float *queries, int nq, int k,
					  ItemPointerData *tids, float *dists, TsdgError *error)
{
	uint32	   *pending_pos = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * k * (Size) nq);
	float	   *pending_dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * k * (Size) nq);
	float	   *out_dists = palloc(sizeof(float) * k);
	ItemPointerData *out_tids = palloc(sizeof(ItemPointerData) * k);
	TsdgStatus	status;

	status = tsdg_exact_set_search(r->pending, queries, nq, k, pending_pos, pending_dists, error);
	for (int q = 0; q < nq && status == TSDG_OK; q++)
	{
		ItemPointerData *qtids = tids + (Size) q * k;
		float	   *qdists = dists + (Size) q * k;
		int			graph_count = 0;
		int			count;

		while (graph_count < k && ItemPointerIsValid(&qtids[graph_count]))
			graph_count++;
		count = MergePendingResults(r, k, graph_count, qdists, NULL, qtids, k,
									pending_pos + (Size) q * k, pending_dists + (Size) q * k,
									out_dists, NULL, out_tids);
		memcpy(qtids, out_tids, sizeof(ItemPointerData) * count);
		memcpy(qdists, out_dists, sizeof(float) * count);
		for (int i = count; i < k; i++)
		{
			ItemPointerSetInvalid(&qtids[i]);
			qdists[i] = get_float4_infinity();
		}
	}
	pfree(pending_pos);
	pfree(pending_dists);
	pfree(out_dists);
	pfree(out_tids);
	return status;
}

/* before the answer: the session may give the batch area to another once it has it */
static void
LetGoOfBatchArea(const TakenRequest *t)
{
	if (t->copy.in_batch_area)
		TsdgIpcLetGoOfBatchArea();
}

/*
 * A batch of queries in the batch area or a DSM segment, answered as heap
 * TIDs: the session does not read a page per result. Deleted nodes are
 * skipped, so the search asks for as many more results as the index has
 * deleted nodes, up to k more.
 */
static void
ServeSearchBatch(TakenRequest *t)
{
	const TsdgSearchArgs *args = &t->copy.args.search;
	ResidentIndex *r = FindResident(&args->key);
	BulkMapping map;
	TsdgBulkHeader *header;
	TsdgError	error;
	TsdgStatus	status;
	TimestampTz start;
	int			k = args->k;
	int			wide_k;
	bool		pending_searched;

	t->done = true;
	if (r == NULL || r->dims != args->dims)
	{
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id,
					  r == NULL && PromiseLoad(&args->key) ? TSDG_REPLY_NEED_INDEX : TSDG_REPLY_NOT_RESIDENT,
					  0, NULL, NULL, NULL, 0, NULL);
		return;
	}
	DropOlderGraphs(r);
	if (!MapBulk(&t->copy, &map))
	{
		LetGoOfBatchArea(t);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the GPU worker could not map the batch's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	wide_k = r->flags != NULL ? k + Min(k, (int) args->key.deleted_count) : k;
	r->last_used = start = GetCurrentTimestamp();
	status = tsdg_index_search_payload(r->index, TsdgBulkArray(map.address, header->queries),
									   args->nq, wide_k, k, Max(args->ef, wide_k), args->lambda_limit,
									   TsdgBulkArray(map.address, header->tids),
									   TsdgBulkArray(map.address, header->dists), &error);
	if (status == TSDG_OK)
		status = MergeUnreachedTids(r, TsdgBulkArray(map.address, header->queries), args->nq, k,
									TsdgBulkArray(map.address, header->tids),
									TsdgBulkArray(map.address, header->dists), &error);
	pending_searched = status == TSDG_OK && PendingCopyCovers(r, args);
	if (pending_searched)
		status = MergePendingIntoBatch(r, TsdgBulkArray(map.address, header->queries), args->nq, k,
									   TsdgBulkArray(map.address, header->tids),
									   TsdgBulkArray(map.address, header->dists), &error);
	if (status == TSDG_OK)
	{
		pg_atomic_fetch_add_u64(&TsdgShared->batches, 1);
		pg_atomic_fetch_add_u64(&TsdgShared->batched_queries, args->nq);
		if (args->nq >= TSDG_LOGGED_BATCH)
			ereport(LOG,
					(errmsg("pg_tsdg GPU worker: searched a batch of %d queries (k %d, ef %d) in %.3f ms",
							args->nq, wide_k, Max(args->ef, wide_k), SecondsSince(start) * 1000)));
	}
	UnmapBulk(&map);
	LetGoOfBatchArea(t);
	TsdgIpcAnswerSearch(t->slot, t->copy.request_id, ReplyOf(status),
						status == TSDG_OK ? args->nq : 0, NULL, NULL, NULL, 0,
						pending_searched && status == TSDG_OK, get_float4_infinity(),
						status == TSDG_OK ? NULL : error.message);
}

/* ---- pending rows ---- */

/*
 * Adds the rows a session sent to the resident index's copy of its pending
 * rows: the part past what the copy has (sessions that found it behind at
 * once send the same rows), the whole copy replaced at a newer epoch. Rows
 * sent at an older epoch (read before a VACUUM moved them) are dropped.
 */
static void
ServePendingRows(TakenRequest *t)
{
	const TsdgPendingArgs *args = &t->copy.args.pending;
	ResidentIndex *r = FindResident(&args->key);
	BulkMapping map;
	TsdgError	error;
	TsdgStatus	status = TSDG_OK;
	int64		have;

	t->done = true;
	if (r == NULL || r->dims != args->dims)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_NOT_RESIDENT, 0, NULL, NULL, NULL,
					  0, NULL);
		return;
	}
	if (r->pending != NULL && args->pending_epoch < r->pending_epoch)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, 0, NULL, NULL, NULL, 0, NULL);
		return;
	}
	if (!MapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the GPU worker could not map the pending rows' shared memory segment");
		return;
	}
	if (r->pending == NULL)
	{
		r->pending = tsdg_exact_set_create(device_backend, r->dims, r->metric, &error);
		if (r->pending == NULL)
			status = TSDG_ERR_DEVICE;
	}
	if (status == TSDG_OK && args->pending_epoch != r->pending_epoch)
	{
		tsdg_exact_set_clear(r->pending);
		r->pending_epoch = args->pending_epoch;
	}
	have = status == TSDG_OK ? tsdg_exact_set_size(r->pending) : 0;
	if (status == TSDG_OK && args->first > have)
	{
		status = TSDG_ERR_INVALID_ARGUMENT;
		snprintf(error.message, sizeof(error.message),
				 "pending rows from %lld sent to a copy of %lld", (long long) args->first,
				 (long long) have);
	}
	else if (status == TSDG_OK && args->first + args->n > have)
	{
		int64		skip = have - args->first;
		int64		added = args->n - skip;
		int64		limit = TsdgShared->memory_limit_bytes;
		const TsdgBulkHeader *header = (const TsdgBulkHeader *) map.address;
		const float *rows = TsdgBulkArray(map.address, header->rows);
		const ItemPointerData *tids = TsdgBulkArray(map.address, header->tids);

		/* other indexes are not dropped for pending rows, which the sessions can scan */
		if (limit > 0 &&
			ResidentBytesInAll() + added * (int64) sizeof(float) * (args->dims + 1) > limit)
		{
			status = TSDG_ERR_OUT_OF_MEMORY;
			snprintf(error.message, sizeof(error.message),
					 "%lld more pending rows would pass tsdg.gpu_memory_limit",
					 (long long) added);
		}

		if (status == TSDG_OK && have + added > r->pending_capacity)
		{
			int64		capacity = Max(have + added, r->pending_capacity * 2);
			ItemPointerData *grown = realloc(r->pending_tids, sizeof(ItemPointerData) * capacity);

			if (grown == NULL)
			{
				status = TSDG_ERR_OUT_OF_MEMORY;
				strlcpy(error.message, "out of host memory for the pending rows' TIDs",
						sizeof(error.message));
			}
			else
			{
				r->pending_tids = grown;
				r->pending_capacity = capacity;
			}
		}
		if (status == TSDG_OK)
			status = tsdg_exact_set_append(r->pending, rows + skip * args->dims, added, &error);
		if (status == TSDG_OK)
		{
			memcpy(r->pending_tids + have, tids + skip, sizeof(ItemPointerData) * added);
			r->pending_end_block = args->end_block;
			r->pending_end_offset = args->end_offset;
		}
	}
	UnmapBulk(&map);
	PublishResidents();
	TsdgIpcAnswer(t->slot, t->copy.request_id, ReplyOf(status), 0, NULL, NULL, NULL, 0,
				  status == TSDG_OK ? NULL : error.message);
}

/* ---- loads and builds ---- */

static void
ServeLoad(TakenRequest *t)
{
	const TsdgLoadArgs *args = &t->copy.args.load;
	BulkMapping map;
	TsdgBulkHeader *header;
	ResidentGraph graph = {0};
	TsdgError	error;
	TsdgStatus	status;

	t->done = true;
	ForgetPromise(&args->key);
	if (FindResident(&args->key) != NULL)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, 0, NULL, NULL, NULL, 0, NULL);
		return;
	}
	if (!MapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the GPU worker could not map the index image's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	graph.rows = TsdgBulkArray(map.address, header->rows);
	graph.n = args->n;
	graph.dims = args->dims;
	graph.metric = args->metric;
	graph.degree = args->degree;
	graph.neighbors = TsdgBulkArray(map.address, header->neighbors);
	graph.lambdas = TsdgBulkArray(map.address, header->lambdas);
	graph.tids = TsdgBulkArray(map.address, header->tids);
	graph.flags = TsdgBulkArray(map.address, header->flags);
	status = AddResident(&args->key, &graph, NULL, &map, &error);
	if (status == TSDG_OK && !FindUnreached(FindResident(&args->key), &args->check, NULL, &error))
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: could not check which of the newest rows of index %u/%u its searches reach, some may not be found: %s",
						args->key.database, args->key.relfilenode, error.message)));
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	UnmapBulk(&map);
	if (status == TSDG_OK)
		pg_atomic_fetch_add_u64(&TsdgShared->loads, 1);
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: could not load index %u/%u version " UINT64_FORMAT ": %s",
						args->key.database, args->key.relfilenode, args->key.graph_version,
						error.message)));
	TsdgIpcAnswer(t->slot, t->copy.request_id, ReplyOf(status), 0, NULL, NULL, NULL, 0,
				  status == TSDG_OK ? NULL : error.message);
}

typedef struct BuildPollState
{
	TakenRequest *request;
} BuildPollState;

/* Sends searches that arrive during a build or merge to the CPU instead of making them wait. */
static void
TurnAwaySearches(void)
{
	for (int i = 0; i < TsdgShared->slot_count; i++)
	{
		TsdgRequestSlot *slot = &TsdgShared->slots[i];
		TsdgRequestSlot copy;

		if (slot->state != TSDG_SLOT_QUEUED || slot->kind == TSDG_REQUEST_BUILD ||
			slot->kind == TSDG_REQUEST_MERGE || slot->kind == TSDG_REQUEST_LOAD_INDEX)
			continue;
		if (TsdgIpcTake(slot, &copy, NULL))
			TsdgIpcAnswer(slot, copy.request_id, TSDG_REPLY_BUSY, 0, NULL, NULL, NULL, 0, NULL);
	}
}

static bool
BuildPoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	BuildPollState *state = (BuildPollState *) arg;
	TakenRequest *t = state->request;

	TsdgIpcReportProgress(t->slot, t->copy.request_id, (int) phase, done, total);
	TurnAwaySearches();
	return shutdown_requested || TsdgIpcCancelRequested(t->slot, t->copy.request_id);
}

/*
 * The metapage's entry points and d_nn1+ of the graph just built (n rows and
 * search lists), into the segment's summary; the session writes its pages
 * meanwhile and waits for this only at the end (TsdgWorkerBuildSummary). A
 * merge's comes from the merged graph's resident copy (SummarizeMergedGraph).
 */
static bool
ComputeSummary(TsdgBuildSummary *summary, const float *rows, int64 n, int dims,
			   TsdgMetric metric, const uint32 *neighbors, int degree, Oid database,
			   Oid relfilenode)
{
	uint32		entries[TSDG_SUMMARY_MAX_ENTRIES];
	TimestampTz start = GetCurrentTimestamp();
	TsdgError	error;
	bool		ok;

	ok = tsdg_select_entry_points(rows, n, dims, metric, neighbors, degree,
								  TSDG_SUMMARY_MAX_ENTRIES, entries, &error) == TSDG_OK &&
		tsdg_graph_nn1_bound(rows, n, dims, metric, neighbors, degree, &summary->nn1_bound,
							 &error) == TSDG_OK;
	summary->unreached_count = 0;
	if (ok)
	{
		summary->entry_count = 0;
		for (int i = 0; i < TSDG_SUMMARY_MAX_ENTRIES; i++)
			if (entries[i] != TSDG_INVALID_ID)
				summary->entry_points[summary->entry_count++] = entries[i];
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: entry points and statistics of index %u/%u in %.3f s",
						database, relfilenode, SecondsSince(start))));
	}
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: no entry points for index %u/%u, the session computes them: %s",
						database, relfilenode, error.message)));
	return ok;
}

/* The summary is ready (or failed): the session waiting for it goes on. */
static void
PublishSummary(TakenRequest *t, TsdgBuildSummary *summary, bool ok)
{
	pg_write_barrier();
	pg_atomic_write_u32(&summary->state, ok ? TSDG_SUMMARY_READY : TSDG_SUMMARY_FAILED);
	if (t->copy.requester_latch != NULL)
		SetLatch(t->copy.requester_latch);
}

static void
ServeBuild(TakenRequest *t)
{
	const TsdgBuildArgs *args = &t->copy.args.build;
	BulkMapping map;
	TsdgBulkHeader *header;
	TsdgError	error;
	TsdgStatus	status;
	BuildPollState poll = {t};
	TimestampTz start;
	const float *rows;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint32	   *knn_ids;

	t->done = true;
	if (!MapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the GPU worker could not map the build's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	rows = TsdgBulkArray(map.address, header->rows);
	neighbors = TsdgBulkArray(map.address, header->neighbors);
	lambdas = TsdgBulkArray(map.address, header->lambdas);
	knn_ids = TsdgBulkArray(map.address, header->knn_ids);
	if (args->n > header->capacity)
	{
		UnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the build's shared memory segment is smaller than its rows");
		return;
	}
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: building the graph of %lld rows of %d dimensions for index %u/%u on %s",
					(long long) args->n, args->dims, args->key.database, args->key.relfilenode,
					tsdg_backend_name(device_backend))));
	start = GetCurrentTimestamp();
	status = tsdg_build_graph(device_backend, rows, args->n, args->dims, args->metric,
							  &args->params, neighbors, lambdas, knn_ids, NULL,
							  BuildPoll, &poll, &error);
	if (status == TSDG_ERR_OUT_OF_MEMORY && LeastRecentlyUsed() != NULL)
	{
		EvictAll("device out of memory for a build");
		status = tsdg_build_graph(device_backend, rows, args->n, args->dims, args->metric,
								  &args->params, neighbors, lambdas, knn_ids, NULL,
								  BuildPoll, &poll, &error);
	}
	if (status == TSDG_OK)
	{
		pg_atomic_fetch_add_u64(&TsdgShared->builds, 1);
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: built the graph of index %u/%u in %.3f s",
						args->key.database, args->key.relfilenode, SecondsSince(start))));
		/* answer first: the session writes its pages while the summary is computed and the graph uploaded */
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, 0, NULL, NULL, NULL, 0, NULL);
		if (header->summary != 0)
		{
			TsdgBuildSummary *summary = TsdgBulkArray(map.address, header->summary);

			PublishSummary(t, summary,
						   ComputeSummary(summary, rows, args->n, args->dims, args->metric,
										  neighbors, args->params.degree, args->key.database,
										  args->key.relfilenode));
		}
		if (args->key.relfilenode != InvalidOid && FindResident(&args->key) == NULL)
		{
			ResidentGraph graph = {rows, args->n, args->dims, args->metric, args->params.degree,
				neighbors, lambdas, knn_ids, args->params.build_k,
			TsdgBulkArray(map.address, header->tids), NULL};
			TsdgError	load_error;

			if (AddResident(&args->key, &graph, NULL, &map, &load_error) != TSDG_OK)
				ereport(LOG,
						(errmsg("pg_tsdg GPU worker: the new graph of index %u/%u stays on disk only: %s",
								args->key.database, args->key.relfilenode, load_error.message)));
			PinListsOf(&args->key);
		}
	}
	else
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: build for index %u/%u %s: %s",
						args->key.database, args->key.relfilenode,
						status == TSDG_ERR_CANCELLED ? "cancelled" : "failed", error.message)));
		TsdgIpcAnswer(t->slot, t->copy.request_id, ReplyOf(status), 0, NULL, NULL, NULL, 0,
					  error.message);
	}
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	UnmapBulk(&map);
}

/* the arrays of a merge's segment (see TsdgBulkHeader) */
typedef struct MergeArrays
{
	const float *rows;
	const uint32 *old_knn_ids;
	const float *old_knn_dists;	/* NULL: computed by the core */
	const uint32 *old_neighbors;
	const uint8 *old_lambdas;
	const uint8 *old_changed;	/* NULL: no list was repaired */
	ItemPointerData *tids;		/* of all rows, for the merged graph's copy */
	uint32	   *knn_ids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint8	   *changed;
	/* the old graph's resident index, whose rows the merge reads on the device; or NULL */
	const TsdgResidentIndex *old_index;
	/* the old graph's rows, which the merge copies into rows itself; or NULL */
	const float *old_rows_source;
	/* the old lists copied out of a resident graph evicted for the merge */
	uint32	   *owned_knn_ids;
	uint32	   *owned_neighbors;
	uint8	   *owned_lambdas;
	/* rows and knn_ids where the session left them out of the segment (TsdgTakeHostArray) */
	float	   *merged_rows;
	uint32	   *merged_knn_ids;
} MergeArrays;

/*
 * BuildPoll, and where the time goes: the time since the previous poll is
 * counted to the phase that poll saw; the core polls when a phase begins as
 * well as every 50 ms, so each phase's time is exact but for the steps that
 * do not mark their phase (the GNND of the new rows).
 */
typedef struct MergePollState
{
	BuildPollState build;
	TimestampTz last_poll;
	int			last_phase;
	double		seconds[TSDG_PHASE_LINK + 1];
	TsdgBuildSummary *summary;	/* NULL: the session waits for the answer only */
} MergePollState;

static bool
MergePoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	MergePollState *state = (MergePollState *) arg;
	TimestampTz now = GetCurrentTimestamp();

	if ((phase == TSDG_PHASE_DIVERSIFY || phase == TSDG_PHASE_LINK) && state->summary != NULL)
	{
		/*
		 * The merged k-NN lists, then the search lists (done of them, in row
		 * order), are in the segment: the session writes them meanwhile.
		 */
		bool		news = false;

		pg_write_barrier();
		if (pg_atomic_read_u32(&state->summary->knn_ready) == 0)
		{
			pg_atomic_write_u32(&state->summary->knn_ready, 1);
			news = true;
		}
		if (phase == TSDG_PHASE_LINK && done > (int64_t) pg_atomic_read_u64(&state->summary->lists_ready))
		{
			pg_atomic_write_u64(&state->summary->lists_ready, (uint64) done);
			news = true;
		}
		if (news && state->build.request->copy.requester_latch != NULL)
			SetLatch(state->build.request->copy.requester_latch);
	}
	if (phase >= TSDG_PHASE_KNN_GRAPH && phase <= TSDG_PHASE_LINK)
	{
		state->seconds[state->last_phase] += (double) (now - state->last_poll) / 1000000.0;
		state->last_phase = phase;
	}
	state->last_poll = now;
	return BuildPoll(&state->build, phase, done, total);
}

/*
 * The merge the session would run itself (tsdg_merge_graph_incremental),
 * with the device's backend when there is one: GNND of the new rows, then
 * the old lists' distances, the incremental GGM and both TSDG stages with the
 * rows and lists kept on the device (Backend::merge_graph), the old rows
 * copied there from the old graph's resident index when the worker holds
 * it; with the CPU backend, the incremental merge on the worker's threads.
 */
static TsdgStatus
ComputeMerge(const TsdgMergeArgs *args, const MergeArrays *a, MergePollState *poll,
			 TsdgError *error)
{
	TsdgBuildParams params = args->params;
	long		cores = sysconf(_SC_NPROCESSORS_ONLN);

	/*
	 * The host's part of a GPU merge (the component linking above all) leaves
	 * a core to the session, which writes the list pages meanwhile.
	 */
	if (device_backend != NULL && params.threads == 0 && cores > 2)
		params.threads = (int) cores - 1;
	return tsdg_merge_graph_incremental(device_backend, a->rows, a->old_index, a->old_rows_source,
										args->n_old, args->n_new, args->dims, args->metric, &params,
										a->old_knn_ids, a->old_knn_dists, a->old_neighbors,
										a->old_lambdas, a->old_changed, a->knn_ids, NULL,
										a->neighbors, a->lambdas, a->changed, MergePoll, poll,
										error);
}

/*
 * The old graph a session left to the worker's copy r: its TIDs into the
 * segment, its rows to be copied there by the merge (the new rows follow
 * them there), and with graph_resident its k-NN and search lists, read
 * where they are. False when r is not that graph.
 */
static bool
TakeOldGraph(const TsdgMergeArgs *args, ResidentIndex *r, MergeArrays *a)
{
	if (r == NULL || r->n != args->n_old || r->dims != args->dims ||
		(args->graph_resident &&
		 (r->knn_ids == NULL || r->knn_k != args->params.build_k ||
		  r->degree != args->params.degree || r->neighbors == NULL)))
		return false;
	memcpy(a->tids, r->tids, sizeof(ItemPointerData) * args->n_old);
	a->old_index = r->index;
	a->old_rows_source = r->rows;
	if (args->graph_resident)
	{
		a->old_knn_ids = r->knn_ids;
		a->old_neighbors = r->neighbors;
		a->old_lambdas = r->lambdas;
	}
	r->last_used = GetCurrentTimestamp();
	return true;
}

/*
 * The old lists read from r copied into the segment's arrays before r may be
 * evicted, or, when the session left them out of the segment, into memory of
 * this process (a->owned, freed by FreeOwnedLists). False when that memory
 * is not to be had.
 */
static bool
CopyOldGraphIn(const TsdgMergeArgs *args, const TsdgBulkHeader *header, void *base,
			   MergeArrays *a)
{
	Size		n_old = (Size) args->n_old;
	Size		knn_bytes = sizeof(uint32) * args->params.build_k * n_old;
	Size		list_bytes = sizeof(uint32) * args->params.degree * n_old;
	Size		lambda_bytes = sizeof(uint8) * args->params.degree * n_old;

	if (header->knn_ids == 0)
	{
		a->owned_knn_ids = CopyOut(a->old_knn_ids, knn_bytes);
		a->owned_neighbors = CopyOut(a->old_neighbors, list_bytes);
		a->owned_lambdas = CopyOut(a->old_lambdas, lambda_bytes);
		a->old_knn_ids = a->owned_knn_ids;
		a->old_neighbors = a->owned_neighbors;
		a->old_lambdas = a->owned_lambdas;
		return a->owned_knn_ids != NULL && a->owned_neighbors != NULL && a->owned_lambdas != NULL;
	}
	memcpy(TsdgBulkArray(base, header->knn_ids), a->old_knn_ids, knn_bytes);
	memcpy(TsdgBulkArray(base, header->neighbors), a->old_neighbors, list_bytes);
	memcpy(TsdgBulkArray(base, header->lambdas), a->old_lambdas, lambda_bytes);
	a->old_knn_ids = TsdgBulkArray(base, header->knn_ids);
	a->old_neighbors = TsdgBulkArray(base, header->neighbors);
	a->old_lambdas = TsdgBulkArray(base, header->lambdas);
	return true;
}

/*
 * The merged graph's rows and k-NN lists in memory of this process where the
 * session left them out of the segment: the new rows are copied in after the
 * old ones' place, which the merge fills from the old graph's copy. False
 * when the memory is not to be had.
 */
static bool
TakeMergedArrays(const TsdgMergeArgs *args, const TsdgBulkHeader *header, void *base,
				 MergeArrays *a)
{
	Size		n = (Size) (args->n_old + args->n_new);

	if (header->rows_from != 0)
	{
		a->merged_rows = TsdgTakeHostArray(sizeof(float) * args->dims * n);
		if (a->merged_rows == NULL)
			return false;
		memcpy(a->merged_rows + (Size) args->n_old * args->dims, TsdgBulkArray(base, header->rows),
			   sizeof(float) * args->dims * (Size) args->n_new);
		a->rows = a->merged_rows;
	}
	if (header->merged_knn_ids == 0)
	{
		a->merged_knn_ids = TsdgTakeHostArray(sizeof(uint32) * args->params.build_k * n);
		if (a->merged_knn_ids == NULL)
			return false;
		a->knn_ids = a->merged_knn_ids;
	}
	return true;
}

static void
GiveBackMergedArrays(MergeArrays *a)
{
	TsdgGiveBackHostArray(a->merged_rows);
	TsdgGiveBackHostArray(a->merged_knn_ids);
	a->merged_rows = NULL;
	a->merged_knn_ids = NULL;
}

static void
FreeOwnedLists(MergeArrays *a)
{
	free(a->owned_knn_ids);
	free(a->owned_neighbors);
	free(a->owned_lambdas);
	a->owned_knn_ids = NULL;
	a->owned_neighbors = NULL;
	a->owned_lambdas = NULL;
}

/*
 * Keeps the merged graph resident under the key the session's metapage will
 * have after its switch, next to the old graph its searches use until then:
 * the first search after the switch finds it, and the next merge reads
 * neither rows nor lists from the pages. Its host arrays stay in the merge's
 * segment, with the merge's inputs, until a newer graph replaces it, but for
 * the rows and k-NN lists of this process's own memory, which it takes over.
 */
static void
KeepMergedGraph(const TsdgMergeArgs *args, MergeArrays *a, BulkMapping *map)
{
	/* with the old rows from the worker's copy, the device has them already */
	ResidentGraph graph = {a->rows, args->n_old + args->n_new, args->dims, args->metric,
		args->params.degree, a->neighbors, a->lambdas, a->knn_ids, args->params.build_k,
		a->tids, NULL, a->merged_rows, a->merged_knn_ids,
	args->rows_resident ? &args->old_key : NULL, args->n_old};
	TsdgError	error;

	a->merged_rows = NULL;
	a->merged_knn_ids = NULL;
	if (AddResident(&args->new_key, &graph, &args->old_key, map, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: the merged graph of index %u/%u stays on disk only: %s",
						args->database, args->relfilenode, error.message)));
}

/*
 * The metapage's summary of the merged graph, from its resident copy: the
 * entry points its searches start from, d_nn1+, and the new rows those
 * searches do not reach after the graph's repair for them, which the copy
 * keeps (FindUnreached; the lists the repair changes are marked in the
 * merge's changed flags). False when the graph is not resident or
 * something failed (LOG): the session then computes the summary itself,
 * with the pages' walk.
 */
static bool
SummarizeMergedGraph(const TsdgMergeArgs *args, uint8 *changed, TsdgBuildSummary *summary)
{
	ResidentIndex *r = FindResident(&args->new_key);
	uint32		entries[TSDG_SUMMARY_MAX_ENTRIES];
	TimestampTz start = GetCurrentTimestamp();
	TsdgError	error;

	if (r == NULL)
		return false;
	if (tsdg_index_summary(r->index, TSDG_SUMMARY_MAX_ENTRIES, entries, &summary->nn1_bound,
						   &error) != TSDG_OK ||
		!FindUnreached(r, &args->check, changed, &error))
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: no summary of the merged graph of index %u/%u, the session computes it: %s",
						args->database, args->relfilenode, error.message)));
		return false;
	}
	summary->entry_count = 0;
	for (int i = 0; i < TSDG_SUMMARY_MAX_ENTRIES; i++)
		if (entries[i] != TSDG_INVALID_ID)
			summary->entry_points[summary->entry_count++] = entries[i];
	summary->unreached_count = r->unreached_count;
	memcpy(summary->unreached, r->unreached,
		   sizeof(uint32) * Min(r->unreached_count, TSDG_SUMMARY_MAX_UNREACHED));
	if (r->unreached_count > TSDG_SUMMARY_MAX_UNREACHED)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: index %u/%u has more unreached rows than its metapage lists (%lld): the sessions' own scans search the first %d exactly",
						args->database, args->relfilenode, (long long) r->unreached_count,
						TSDG_SUMMARY_MAX_UNREACHED)));
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: summary of the merged graph of index %u/%u in %.3f s",
					args->database, args->relfilenode, SecondsSince(start))));
	return true;
}

static void
ServeMerge(TakenRequest *t)
{
	const TsdgMergeArgs *args = &t->copy.args.merge;
	BulkMapping map;
	TsdgBulkHeader *header;
	MergeArrays a;
	ResidentIndex *old_graph;
	MergePollState poll;
	TsdgBuildSummary *summary;
	TsdgError	error;
	TsdgStatus	status;
	TimestampTz start;

	t->done = true;
	if (!MapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the GPU worker could not map the merge's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	memset(&a, 0, sizeof(a));
	a.rows = TsdgBulkArray(map.address, header->rows);
	a.old_knn_ids = TsdgBulkArray(map.address, header->knn_ids);
	a.old_knn_dists = TsdgBulkArray(map.address, header->dists);
	a.old_neighbors = TsdgBulkArray(map.address, header->neighbors);
	a.old_lambdas = TsdgBulkArray(map.address, header->lambdas);
	a.old_changed = TsdgBulkArray(map.address, header->flags);
	a.tids = TsdgBulkArray(map.address, header->tids);
	a.knn_ids = TsdgBulkArray(map.address, header->merged_knn_ids);
	a.neighbors = TsdgBulkArray(map.address, header->merged_neighbors);
	a.lambdas = TsdgBulkArray(map.address, header->merged_lambdas);
	a.changed = TsdgBulkArray(map.address, header->changed);

	if (header->rows_from != 0 && (header->rows_from != args->n_old || !args->rows_resident))
	{
		UnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED, 0, NULL, NULL, NULL, 0,
					  "the merge's segment leaves out old rows the session does not leave to the GPU worker");
		return;
	}
	old_graph = FindResident(&args->old_key);
	if ((args->rows_resident || args->graph_resident) && !TakeOldGraph(args, old_graph, &a))
	{
		UnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_NOT_RESIDENT, 0, NULL, NULL,
					  NULL, 0, "the GPU worker no longer holds the index's graph");
		return;
	}
	/* the graphs before the one merged are stale: their memory goes to this merge's arrays */
	if (old_graph != NULL)
		DropOlderGraphs(old_graph);
	if (!TakeMergedArrays(args, header, map.address, &a))
	{
		GiveBackMergedArrays(&a);
		UnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OUT_OF_MEMORY, 0, NULL, NULL,
					  NULL, 0, "the GPU worker is out of host memory for the merged graph");
		return;
	}
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: merging %lld rows into the graph of %lld rows of index %u/%u on %s%s",
					(long long) args->n_new, (long long) args->n_old, args->database,
					args->relfilenode, tsdg_backend_name(device_backend),
					args->graph_resident ? ", the old graph from its copy" :
					args->rows_resident ? ", the old rows from its copy of the graph" : "")));
	memset(&poll, 0, sizeof(poll));
	poll.build.request = t;
	poll.last_poll = start = GetCurrentTimestamp();
	poll.last_phase = TSDG_PHASE_KNN_GRAPH;
	poll.summary = TsdgBulkArray(map.address, header->summary);
	status = ComputeMerge(args, &a, &poll, &error);
	if (status == TSDG_ERR_OUT_OF_MEMORY && LeastRecentlyUsed() != NULL &&
		(poll.summary == NULL || pg_atomic_read_u32(&poll.summary->knn_ready) == 0))
	{
		if (!args->graph_resident || CopyOldGraphIn(args, header, map.address, &a))
		{
			EvictAll("device out of memory for a merge");
			/* the first attempt copied the old rows, whatever it returned */
			a.old_index = NULL;
			a.old_rows_source = NULL;
			memset(poll.seconds, 0, sizeof(poll.seconds));
			poll.last_poll = start = GetCurrentTimestamp();
			status = ComputeMerge(args, &a, &poll, &error);
		}
	}
	FreeOwnedLists(&a);
	/* the rest, since the last poll, belongs to the last phase seen */
	poll.seconds[poll.last_phase] += SecondsSince(poll.last_poll);
	if (status != TSDG_OK)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: merge for index %u/%u %s: %s",
						args->database, args->relfilenode,
						status == TSDG_ERR_CANCELLED ? "cancelled" : "failed", error.message)));
		TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
		GiveBackMergedArrays(&a);
		UnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, ReplyOf(status), 0, NULL, NULL, NULL, 0,
					  error.message);
		return;
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: merged index %u/%u (%lld + %lld rows) in %.3f s: "
					"k-NN graph of the new rows %.3f s, old lists' distances and GGM %.3f s, "
					"diversification %.3f s, search lists out and component linking %.3f s",
					args->database, args->relfilenode, (long long) args->n_old,
					(long long) args->n_new, SecondsSince(start),
					poll.seconds[TSDG_PHASE_KNN_GRAPH], poll.seconds[TSDG_PHASE_MERGE],
					poll.seconds[TSDG_PHASE_DIVERSIFY], poll.seconds[TSDG_PHASE_LINK]),
			 errdetail("%s Each phase as the progress polls saw it, at its start and 50 ms apart.",
					   device_backend != NULL ?
					   "On the device, the rows and lists kept there from the old lists' distances "
					   "through diversification; the k-NN lists and the search graph copied back after GGM "
					   "and after diversification." :
					   "The incremental merge of the CPU backend.")));

	/* every search list is in the segment, whether or not the merge published them as it went */
	if (poll.summary != NULL)
	{
		pg_write_barrier();
		pg_atomic_write_u64(&poll.summary->lists_ready, (uint64) (args->n_old + args->n_new));
	}
	/* answer first: the session writes its pages while the summary is computed and the graph kept */
	TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, 0, NULL, NULL, NULL, 0, NULL);
	/* the resident copy may take the segment over, the summary with it */
	summary = header->summary != 0 ? TsdgBulkArray(map.address, header->summary) : NULL;
	KeepMergedGraph(args, &a, &map);
	if (summary != NULL)
		PublishSummary(t, summary, SummarizeMergedGraph(args, a.changed, summary));
	PinListsOf(&args->new_key);
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	UnmapBulk(&map);
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
			   !shutdown_requested)
			;
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

/*
 * Waits for the first request, then up to tsdg.batch_wait_us while fewer
 * requests are queued than sessions were active lately.
 */
static void
WaitForBatch(void)
{
	TimestampTz deadline;
	int			expected;

	while (pg_atomic_read_u32(&TsdgShared->queued) == 0 && !shutdown_requested)
	{
		SemWaitUntil(TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000), 1);
		/* idle: the device's memory may have changed under other processes */
		if (device_backend != NULL && pg_atomic_read_u32(&TsdgShared->queued) == 0)
			TsdgPublishDeviceMemory();
		TsdgReleaseIdleHostArrays();
	}
	if (shutdown_requested || TsdgShared->batch_wait_us <= 0)
		return;

	expected = RecentlyActiveSessions(GetCurrentTimestamp());
	deadline = GetCurrentTimestamp() + TsdgShared->batch_wait_us;
	while ((int) pg_atomic_read_u32(&TsdgShared->queued) < expected &&
		   GetCurrentTimestamp() < deadline && !shutdown_requested)
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
			ServePendingRows(&taken[i]);
	/* searches, so that a build in the same batch does not delay them */
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_SEARCH)
			ServeSearchGroup(taken, ntaken, i);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_SEARCH_BATCH)
			ServeSearchBatch(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_LOAD_INDEX)
			ServeLoad(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_BUILD)
			ServeBuild(&taken[i]);
	for (int i = 0; i < ntaken; i++)
		if (!taken[i].done && taken[i].copy.kind == TSDG_REQUEST_MERGE)
			ServeMerge(&taken[i]);
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

static void
LoadDevice(void)
{
	char		path[MAXPGPATH];
	TsdgError	error;

	if (tsdg_worker_backend == TSDG_WORKER_BACKEND_CPU)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker started with the CPU backend (tsdg.worker_backend = cpu)")));
		TsdgIpcSetServerState(TSDG_SERVER_READY, "cpu", "");
		return;
	}

	snprintf(path, sizeof(path), "%s/pg_tsdg_cuda.so", pkglib_path);
	device_backend = tsdg_backend_load(path, tsdg_gpu_device_number, &error);
	if (device_backend == NULL)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker found no GPU: %s", error.message),
				 errdetail("Index builds and searches run on the CPU.")));
		TsdgIpcSetServerState(TSDG_SERVER_NO_DEVICE, "", error.message);
		proc_exit(0);
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker started on %s (device %d)",
					tsdg_backend_name(device_backend), tsdg_gpu_device_number)));
	if (TsdgBatchAreaBase != NULL &&
		tsdg_backend_pin_host_memory(device_backend, TsdgBatchAreaBase,
									 TsdgShared->batch_area.size, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not page-lock the batch area: %s", error.message),
				 errdetail("Batches are copied to the GPU through a staging buffer.")));
	TsdgPublishDeviceMemory();
	TsdgIpcSetServerState(TSDG_SERVER_READY, tsdg_backend_name(device_backend), "");
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

	while (!shutdown_requested)
	{
		WaitForBatch();
		if (shutdown_requested)
			break;
		ServeBatch(taken);
		/* also when searches keep the worker busy: spares are a merge's, not theirs */
		TsdgReleaseIdleHostArrays();
	}

	EvictAll("shutting down");
	if (device_backend != NULL)
		tsdg_backend_free(device_backend);
	TsdgIpcSetServerState(TSDG_SERVER_STOPPED, NULL, NULL);
	proc_exit(0);
}
