/*
 * The GPU server's resident indexes (runs in the GPU server process): the
 * graphs it holds on the device and in host memory, keyed by the metapage
 * they came from, their memory bound and least-recently-used eviction, and
 * the copies of the indexes' pending rows. The loads of shipped index images
 * are in tsdgserverload.c, the newest rows a graph's searches do not reach in
 * tsdgserverunreached.c.
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/relpath.h"
#include "utils/timestamp.h"

#include "tsdggpuserver.h"

static ResidentIndex residents[TSDG_MAX_RESIDENT_INDEXES];

/* ---- the resident indexes ---- */

/* whether two keys name one index's storage, whatever graph of it they hold */
static bool
SameStorage(const TsdgIndexKey *a, const TsdgIndexKey *b)
{
	return a->database == b->database && a->tablespace == b->tablespace &&
		a->relfilenode == b->relfilenode && a->backend == b->backend;
}

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

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		used += residents[i].used ? ResidentBytes(&residents[i]) : 0;
	return used;
}

static void
PublishResidents(void)
{
	int			count = 0;
	int64		used = 0;
	int64		pending_rows[TSDG_MAX_RESIDENT_INDEXES];
	int64		bytes[TSDG_MAX_RESIDENT_INDEXES];

	/* asked outside the spinlock: the GPU's copy takes a lock of its own */
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
	{
		pending_rows[i] = residents[i].used && residents[i].pending != NULL ?
			tsdg_exact_set_size(residents[i].pending) : 0;
		bytes[i] = residents[i].used ? ResidentBytes(&residents[i]) : 0;
	}
	SpinLockAcquire(&TsdgShared->mutex);
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
	{
		TsdgResidentIndexInfo *info;

		if (!residents[i].used)
			continue;
		info = &TsdgShared->resident[count++];
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
	TsdgShared->resident_count = count;
	TsdgShared->memory_used = used;
	SpinLockRelease(&TsdgShared->mutex);
	if (TsdgDeviceBackend != NULL)
		TsdgPublishDeviceMemory();
}

ResidentIndex *
TsdgFindResident(const TsdgIndexKey *key)
{
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
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
		tsdg_backend_unpin_host_memory(TsdgDeviceBackend, r->pinned_lists, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not unlock the pages of a dropped index: %s",
						error.message)));
	TsdgGiveBackHostArray(r->owned_rows);
	TsdgGiveBackHostArray(r->owned_knn_ids);
	if (r->segment.address != NULL)
		TsdgUnmapBulk(&r->segment);
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

ResidentIndex *
TsdgLeastRecentlyUsed(void)
{
	ResidentIndex *lru = NULL;

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
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

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		free_entry |= !residents[i].used;
	while ((limit > 0 && used + bytes > limit) || !free_entry)
	{
		ResidentIndex *lru = TsdgLeastRecentlyUsed();

		if (lru == NULL)
			break;
		used -= ResidentBytes(lru);
		FreeResident(lru, "least recently used, to make room under tsdg.gpu_memory_limit");
		free_entry = true;
	}
}

void
TsdgEvictAll(const char *why)
{
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		if (residents[i].used)
			FreeResident(&residents[i], why);
	PublishResidents();
}

/*
 * Drops the resident copies of indexes whose storage is gone: DROP INDEX,
 * DROP TABLE, TRUNCATE, REINDEX and VACUUM FULL leave the old storage's
 * first file empty at their commit (and unlink it at the next checkpoint),
 * and no search will ask for that storage again, so its copy would hold
 * device and host memory until evicted for others. A live index's file
 * always holds at least its metapage. Paths are relative to the data
 * directory, this process's working directory.
 */
void
TsdgDropGoneIndexes(void)
{
	bool		dropped = false;

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
	{
		RelFileNode node;
		char	   *path;
		struct stat st;
		bool		gone;

		if (!residents[i].used)
			continue;
		node.spcNode = residents[i].key.tablespace;
		node.dbNode = residents[i].key.database;
		node.relNode = residents[i].key.relfilenode;
		path = relpathbackend(node, residents[i].key.backend, MAIN_FORKNUM);
		gone = stat(path, &st) != 0 ? errno == ENOENT : st.st_size == 0;
		pfree(path);
		if (gone)
		{
			FreeResident(&residents[i], "its index's storage is gone (dropped, truncated or rebuilt)");
			dropped = true;
		}
	}
	if (dropped)
		PublishResidents();
}

/*
 * Drops least recently used indexes while a build of n rows lacks the
 * device memory that keeps its rows and lists on the device throughout,
 * when dropping them can give it that. Short of it the build takes its
 * steps apart, which keeps the worker busy (the sessions' searches on the
 * CPU) longer than loading a dropped index again on its next search does.
 */
void
TsdgEvictForBuild(int64 n, int dims, const TsdgBuildParams *params)
{
	size_t		shortfall;
	int64		resident = 0;
	ResidentIndex *lru;

	TsdgDropGoneIndexes();
	shortfall = tsdg_build_device_shortfall(TsdgDeviceBackend, n, dims, params);
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		resident += residents[i].used ? residents[i].bytes : 0;
	if (shortfall == 0 || (int64) shortfall > resident)
		return;
	while (shortfall > 0 && (lru = TsdgLeastRecentlyUsed()) != NULL)
	{
		size_t		before = shortfall;

		FreeResident(lru, "least recently used, to make room on the device for a build");
		shortfall = tsdg_build_device_shortfall(TsdgDeviceBackend, n, dims, params);
		/* memory held by others than this process: dropping more would not help */
		if (shortfall >= before)
			break;
	}
	PublishResidents();
}

static int64
ResidentBytesEstimate(int64 n, int dims, int degree)
{
	/* the rows, the graph, and a heap TID and flags byte per node */
	return n * ((int64) sizeof(float) * dims + (int64) (sizeof(uint32) + sizeof(uint8)) * degree +
				(int64) sizeof(ItemPointerData) + 1);
}

void *
TsdgCopyOut(const void *src, Size bytes)
{
	void	   *dst = malloc(Max(bytes, 1));

	if (dst != NULL && bytes > 0)
		memcpy(dst, src, bytes);
	return dst;
}

/*
 * Page-locks the pages of r's k-NN lists, which the next merge of the graph
 * uploads whole (4 build_k bytes a row): from pageable memory the GPU copies
 * them through a staging buffer. Failing only costs that speed.
 *
 * CUDA refuses a copy of host memory that is page-locked in part (invalid
 * argument), so the pages locked must hold nothing else that is copied to or
 * from the device: the lists lie in an array of the worker's own
 * (TsdgTakeHostArray), whose pages hold nothing else, or in the segment of
 * their graph, whose other arrays no copy reads once the graph is on the
 * device. A malloc'd array would share its first and last pages with others
 * of the heap, which later copies may start in.
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
	if (tsdg_backend_pin_host_memory(TsdgDeviceBackend, (void *) start, end - start, &error) == TSDG_OK)
		r->pinned_lists = (void *) start;
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker could not page-lock a graph's k-NN lists: %s",
						error.message),
				 errdetail("The next merge of the graph uploads them through a staging buffer.")));
}

/* the resident index g's first rows may be copied from, unless it was evicted meanwhile */
static const TsdgResidentIndex *
SameRowsIndex(const ResidentGraph *g)
{
	ResidentIndex *same = g->same_rows_key != NULL ? TsdgFindResident(g->same_rows_key) : NULL;

	return same != NULL && same->n == g->same_rows_n && same->dims == g->dims ? same->index : NULL;
}

/*
 * A resident TsdgAddResident could not load: its arrays released, but a
 * request's segment it took over, which goes back to the caller (the
 * caller's summary and layer lie there too).
 */
static void
DropUnloaded(ResidentIndex *r, BulkMapping *map)
{
	if (r->segment.address != NULL)
	{
		*map = r->segment;
		memset(&r->segment, 0, sizeof(r->segment));
		r->tids = NULL;
		r->flags = NULL;
		r->neighbors = NULL;
		r->lambdas = NULL;
		if (r->rows != r->owned_rows)
			r->rows = NULL;
		if (r->knn_ids != r->owned_knn_ids)
			r->knn_ids = NULL;
	}
	ReleaseResidentArrays(r);
}

/*
 * Makes graph g resident under key, its searches through its navigating
 * layer, which a graph of its size must have. The other graphs of the index
 * are dropped as stale, except keep (not NULL): the graph a merge read, which
 * searches use until the session switches the metapage to this one. When g's
 * arrays lie in the request's segment *map (a DSM segment, not the batch
 * area), the resident takes that mapping over instead of copying them (the
 * session's detach then leaves the memory to this process), and *map is
 * cleared (on failure it is the caller's again); else they are copied. Its own arrays
 * (own_rows, own_knn_ids) are taken over either way, and given back on
 * failure. On failure returns the status with error filled.
 */
TsdgStatus
TsdgAddResident(const TsdgIndexKey *key, const ResidentGraph *g, const TsdgIndexKey *keep,
			BulkMapping *map, TsdgError *error)
{
	ResidentIndex *r = NULL;
	int64		n = g->n;
	int64		estimate = ResidentBytesEstimate(n, g->dims, g->degree);
	TimestampTz start = GetCurrentTimestamp();
	bool		any_deleted = false;
	ItemPointerData no_tid;

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		if (residents[i].used && SameStorage(&residents[i].key, key) &&
			(keep == NULL || !TsdgIndexKeysEqual(&residents[i].key, keep)))
			FreeResident(&residents[i], "a newer graph of the index replaces it");
	EvictFor(estimate);
	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES && r == NULL; i++)
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
		r->tids = TsdgCopyOut(g->tids, sizeof(ItemPointerData) * n);
		if (any_deleted)
			r->flags = TsdgCopyOut(g->flags, n);
		/* the GPU index reads the host rows when it picks its entry points */
		r->rows = g->own_rows != NULL ? g->own_rows : TsdgCopyOut(g->rows, sizeof(float) * n * g->dims);
		r->neighbors = TsdgCopyOut(g->neighbors, sizeof(uint32) * n * g->degree);
		r->lambdas = TsdgCopyOut(g->lambdas, n * g->degree);
		if (g->knn_ids != NULL && g->own_knn_ids == NULL)
		{
			/* in pages of their own, which PinResidentLists may lock whole */
			r->owned_knn_ids = TsdgTakeHostArray(sizeof(uint32) * n * g->knn_k);
			if (r->owned_knn_ids != NULL)
				memcpy(r->owned_knn_ids, g->knn_ids, sizeof(uint32) * n * g->knn_k);
		}
		if (g->knn_ids != NULL)
			r->knn_ids = r->owned_knn_ids;
	}
	if (r->tids == NULL || (any_deleted && r->flags == NULL) || r->rows == NULL ||
		r->neighbors == NULL || r->lambdas == NULL ||
		(g->knn_ids != NULL && r->knn_ids == NULL))
	{
		strlcpy(error->message, "out of host memory for the index copy", sizeof(error->message));
		DropUnloaded(r, map);
		return TSDG_ERR_OUT_OF_MEMORY;
	}
	if (g->layer_nodes != tsdg_layer_node_count(n))
	{
		snprintf(error->message, sizeof(error->message),
				 "a graph of %lld nodes without its navigating layer", (long long) n);
		DropUnloaded(r, map);
		return TSDG_ERR_INVALID_ARGUMENT;
	}

	r->index = tsdg_index_upload_after(TsdgDeviceBackend, SameRowsIndex(g), r->rows, n, g->dims,
									   g->metric, r->neighbors, r->lambdas, g->degree, error);
	if (r->index == NULL && TsdgLeastRecentlyUsed() != NULL)
	{
		/* the device may be full of other indexes: drop them and try again */
		TsdgEvictAll("device out of memory for a new index");
		r->index = tsdg_index_upload_after(TsdgDeviceBackend, SameRowsIndex(g), r->rows, n, g->dims,
										   g->metric, r->neighbors, r->lambdas, g->degree, error);
	}
	if (r->index == NULL)
	{
		DropUnloaded(r, map);
		return strstr(error->message, "memory") != NULL ? TSDG_ERR_OUT_OF_MEMORY : TSDG_ERR_DEVICE;
	}
	/* batches are answered with heap TIDs, mapped where the results are */
	ItemPointerSetInvalid(&no_tid);
	if (tsdg_index_set_payload(r->index, r->tids, sizeof(ItemPointerData), r->flags,
							   TSDG_NODE_DELETED, &no_tid, error) != TSDG_OK ||
		(g->layer_nodes > 0 &&
		 tsdg_index_set_layer(r->index, g->layer_ids, g->layer_lambdas, g->layer_nodes,
							  g->degree, error) != TSDG_OK))
	{
		tsdg_index_free(r->index);
		r->index = NULL;
		DropUnloaded(r, map);
		return strstr(error->message, "memory") != NULL ? TSDG_ERR_OUT_OF_MEMORY : TSDG_ERR_DEVICE;
	}

	/*
	 * One search before the index is published: a backend may prepare what
	 * all its searches share on the first one (the CPU backend picks its
	 * entry points, seconds on wide vectors). That belongs to this load,
	 * while the worker is marked busy and sessions search on the CPU at
	 * once, not to the first queries, which would wait it out.
	 */
	{
		uint32		warm_id;
		float		warm_dist;
		TsdgError	warm_error;

		(void) tsdg_index_search(r->index, r->rows, 1, 1, 1, tsdg_lambda_search, &warm_id,
								 &warm_dist, &warm_error);
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
					(long long) (r->bytes >> 20), tsdg_backend_name(TsdgDeviceBackend),
					TsdgSecondsSince(start))));
	return TSDG_OK;
}

/*
 * Page-locks the k-NN lists of the graph the worker just built or merged,
 * which the next merge uploads: after the answer and the summary, as
 * locking half a gigabyte of pages takes a while.
 */
void
TsdgPinListsOf(const TsdgIndexKey *key)
{
	ResidentIndex *r = TsdgFindResident(key);

	if (r != NULL && TsdgDeviceBackend != NULL && r->knn_ids != NULL && r->pinned_lists == NULL)
		PinResidentLists(r, r->n * r->knn_k * sizeof(uint32));
}

/*
 * Once a search asks for r, the metapage has moved to it: older graphs of
 * its index that a merge kept for the searches meanwhile are dropped.
 */
void
TsdgDropOlderGraphs(const ResidentIndex *r)
{
	bool		dropped = false;

	for (int i = 0; i < TSDG_MAX_RESIDENT_INDEXES; i++)
		if (residents[i].used && &residents[i] != r && SameStorage(&residents[i].key, &r->key) &&
			residents[i].key.graph_version < r->key.graph_version)
		{
			FreeResident(&residents[i], "the index moved on to a newer graph");
			dropped = true;
		}
	if (dropped)
		PublishResidents();
}

/* ---- pending rows ---- */

/*
 * Adds the rows a session sent to the resident index's copy of its pending
 * rows: the part past what the copy has (sessions that found it behind at
 * once send the same rows), the whole copy replaced at a newer epoch. Rows
 * sent at an older epoch (read before a VACUUM moved them) are dropped.
 */
void
TsdgServePendingRows(TakenRequest *t)
{
	const TsdgPendingArgs *args = &t->copy.args.pending;
	ResidentIndex *r = TsdgFindResident(&args->key);
	BulkMapping map;
	TsdgError	error;
	TsdgStatus	status = TSDG_OK;
	int64		have;

	t->done = true;
	if (r == NULL || r->dims != args->dims)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_NOT_RESIDENT, NULL);
		return;
	}
	if (r->pending != NULL && args->pending_epoch < r->pending_epoch)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, NULL);
		return;
	}
	if (!TsdgMapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the pending rows' shared memory segment");
		return;
	}
	if (args->first < 0 || args->n < 0 ||
		!TsdgBulkHasArray(&map, ((const TsdgBulkHeader *) map.address)->rows,
						  args->n * r->dims, sizeof(float), false) ||
		!TsdgBulkHasArray(&map, ((const TsdgBulkHeader *) map.address)->tids,
						  args->n, sizeof(ItemPointerData), false))
	{
		TsdgUnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the pending rows' sizes do not fit their shared memory segment");
		return;
	}
	if (r->pending == NULL)
	{
		r->pending = tsdg_exact_set_create(TsdgDeviceBackend, r->dims, r->metric, &error);
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
	TsdgUnmapBulk(&map);
	PublishResidents();
	TsdgIpcAnswer(t->slot, t->copy.request_id, TsdgReplyOf(status),
				  status == TSDG_OK ? NULL : error.message);
}
