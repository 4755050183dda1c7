/*
 * The GPU server's side of a build in parts (runs in the GPU server process):
 * a session past maintenance_work_mem sends its rows through a segment that
 * holds a part of them, which the worker copies into host arrays of its own
 * (what the device builds from, and the resident copy keeps: the worker's
 * working memory), and takes the graph back through it the same way. The
 * turns are those of TsdgBuildParts. Where each part lies is computed here
 * from the request's checked sizes, never read from the segment.
 */
#include "postgres.h"

#include "storage/latch.h"

#include "tsdggpuserver.h"

/* the session's turn is checked for this often while it copies a part */
#define TSDG_PART_WAIT_MS	10

/* rows [first, first + count) of part i: parts of capacity rows out of n */
static int64
PartRows(int64 i, int64 capacity, int64 n, int64 *first)
{
	*first = i * capacity;
	return Min(capacity, n - *first);
}

/*
 * Waits until the session's *counter reaches target; false when it gave the
 * request up (a cancel, its exit) or the worker shuts down. Searches queued
 * meanwhile go to the CPU, as during the build.
 */
static bool
WaitForSession(TakenRequest *t, pg_atomic_uint64 *counter, uint64 target)
{
	while (pg_atomic_read_u64(counter) < target)
	{
		if (TsdgServerShutdownRequested || TsdgIpcCancelRequested(t->slot, t->copy.request_id))
			return false;
		TsdgTurnAwaySearches();
		TsdgServerNap(counter, target, TSDG_PART_WAIT_MS);
	}
	/* the session's part is read, or its reading done, only after its counter */
	pg_memory_barrier();
	return true;
}

/* the worker's turn is over: the session may take the next */
static void
EndTurn(TakenRequest *t, pg_atomic_uint64 *counter, uint64 value)
{
	pg_memory_barrier();
	pg_atomic_write_u64(counter, value);
	if (t->copy.requester_latch != NULL)
		SetLatch(t->copy.requester_latch);
}

TsdgReply
TsdgReceiveBuildRows(TakenRequest *t, const BulkMapping *map, BuildArrays *arrays)
{
	const TsdgBuildArgs *args = &t->copy.args.build;
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	TsdgBuildParts *parts = TsdgBulkArray(map->address, header->parts);
	const float *part_rows = TsdgBulkArray(map->address, header->rows);
	const ItemPointerData *part_tids = TsdgBulkArray(map->address, header->tids);
	Size		n = (Size) args->n;
	int64		count = (args->n + header->capacity - 1) / header->capacity;
	TimestampTz start = GetCurrentTimestamp();

	memset(arrays, 0, sizeof(BuildArrays));
	arrays->rows = TsdgTakeHostArray(sizeof(float) * args->dims * n);
	arrays->knn_ids = TsdgTakeHostArray(sizeof(uint32) * args->params.build_k * n);
	arrays->tids = malloc(sizeof(ItemPointerData) * n);
	arrays->neighbors = malloc(sizeof(uint32) * args->params.degree * n);
	arrays->lambdas = malloc(sizeof(uint8) * args->params.degree * n);
	if (arrays->rows == NULL || arrays->knn_ids == NULL || arrays->tids == NULL ||
		arrays->neighbors == NULL || arrays->lambdas == NULL)
		return TSDG_REPLY_OUT_OF_MEMORY;
	/* a builder that returns no k-NN lists leaves the first one empty, as in a segment */
	arrays->knn_ids[0] = TSDG_INVALID_ID;

	for (int64 i = 0; i < count; i++)
	{
		int64		first;
		int64		rows = PartRows(i, header->capacity, args->n, &first);

		if (!WaitForSession(t, &parts->rows_sent, (uint64) i + 1))
			return TSDG_REPLY_CANCELLED;
		memcpy(arrays->rows + first * args->dims, part_rows, sizeof(float) * args->dims * rows);
		memcpy(arrays->tids + first, part_tids, sizeof(ItemPointerData) * rows);
		EndTurn(t, &parts->rows_taken, (uint64) i + 1);
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: received the %lld rows of index %u/%u through a shared memory segment of %zu bytes (parts: %lld, of up to %lld rows) in %.3f s",
					(long long) args->n, args->key.database, args->key.relfilenode, map->size,
					(long long) count, (long long) header->capacity, TsdgSecondsSince(start))));
	return TSDG_REPLY_OK;
}

bool
TsdgSendBuildGraph(TakenRequest *t, const BulkMapping *map, const BuildArrays *arrays)
{
	const TsdgBuildArgs *args = &t->copy.args.build;
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	TsdgBuildParts *parts = TsdgBulkArray(map->address, header->parts);
	uint32	   *part_neighbors = TsdgBulkArray(map->address, header->neighbors);
	uint8	   *part_lambdas = TsdgBulkArray(map->address, header->lambdas);
	uint32	   *part_knn_ids = TsdgBulkArray(map->address, header->knn_ids);
	int			degree = args->params.degree;
	int			build_k = args->params.build_k;
	int64		count = (args->n + header->capacity - 1) / header->capacity;
	TimestampTz start = GetCurrentTimestamp();

	for (int64 j = 0; j < count; j++)
	{
		int64		first;
		int64		rows = PartRows(j, header->capacity, args->n, &first);

		if (!WaitForSession(t, &parts->graph_taken, (uint64) j))
			return false;
		memcpy(part_neighbors, arrays->neighbors + first * degree, sizeof(uint32) * degree * rows);
		memcpy(part_lambdas, arrays->lambdas + first * degree, sizeof(uint8) * degree * rows);
		memcpy(part_knn_ids, arrays->knn_ids + first * build_k, sizeof(uint32) * build_k * rows);
		EndTurn(t, &parts->graph_sent, (uint64) j + 1);
	}
	if (!WaitForSession(t, &parts->graph_taken, (uint64) count))
		return false;
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: sent the graph of index %u/%u back in %lld parts in %.3f s",
					args->key.database, args->key.relfilenode, (long long) count,
					TsdgSecondsSince(start))));
	return true;
}

void
TsdgFreeBuildArrays(BuildArrays *arrays)
{
	TsdgGiveBackHostArray(arrays->rows);
	TsdgGiveBackHostArray(arrays->knn_ids);
	free(arrays->tids);
	free(arrays->neighbors);
	free(arrays->lambdas);
	memset(arrays, 0, sizeof(BuildArrays));
}
