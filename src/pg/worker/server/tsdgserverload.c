/*
 * Loads of shipped index images into the GPU server (runs in the GPU server
 * process), and the promises that let one session ship a missing index while
 * the others search on the CPU.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/* a load promised to a session expires if it never arrives */
#define TSDG_LOAD_PROMISE_US	(60 * 1000000L)
#define TSDG_MAX_PROMISES		16

typedef struct LoadPromise
{
	TsdgIndexKey key;
	TimestampTz promised_at;
} LoadPromise;

static LoadPromise promises[TSDG_MAX_PROMISES];

bool
TsdgPromiseLoad(const TsdgIndexKey *key)
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

/*
 * The rows an index image marks TSDG_IMAGE_UNREACHED (flags may be NULL),
 * malloc'd, their count in *count; NULL when there are none (or no memory:
 * the load's own check then stands alone).
 */
static uint32 *
TsdgImageUnreached(const uint8 *flags, int64 n, int64 *count)
{
	uint32	   *rows;

	*count = 0;
	for (int64 i = 0; flags != NULL && i < n; i++)
		*count += (flags[i] & TSDG_IMAGE_UNREACHED) != 0;
	rows = *count > 0 ? malloc(sizeof(uint32) * *count) : NULL;
	if (rows == NULL)
	{
		*count = 0;
		return NULL;
	}
	*count = 0;
	for (int64 i = 0; i < n; i++)
		if (flags[i] & TSDG_IMAGE_UNREACHED)
			rows[(*count)++] = (uint32) i;
	return rows;
}

void
TsdgServeLoad(TakenRequest *t)
{
	const TsdgLoadArgs *args = &t->copy.args.load;
	BulkMapping map;
	TsdgBulkHeader *header;
	ResidentGraph graph = {0};
	TsdgError	error;
	TsdgStatus	status;
	uint32	   *known;
	int64		known_count;

	t->done = true;
	ForgetPromise(&args->key);
	if (TsdgFindResident(&args->key) != NULL)
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, NULL);
		return;
	}
	if (!TsdgMapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the index image's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	if (!TsdgGraphSizesValid(args->n, args->dims, args->degree, 0) ||
		!TsdgBulkHasArray(&map, header->rows, args->n * args->dims, sizeof(float), false) ||
		!TsdgBulkHasArray(&map, header->neighbors, args->n * args->degree, sizeof(uint32), false) ||
		!TsdgBulkHasArray(&map, header->lambdas, args->n * args->degree, sizeof(uint8), false) ||
		!TsdgBulkHasArray(&map, header->tids, args->n, sizeof(ItemPointerData), false) ||
		!TsdgBulkHasArray(&map, header->flags, args->n, sizeof(uint8), true) ||
		args->layer_nodes != tsdg_layer_node_count(args->n) ||
		!TsdgBulkHasArray(&map, header->layer_ids, args->layer_nodes * args->degree, sizeof(uint32),
						  args->layer_nodes == 0) ||
		!TsdgBulkHasArray(&map, header->layer_lambdas, args->layer_nodes * args->degree,
						  sizeof(uint8), args->layer_nodes == 0))
	{
		TsdgUnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the index image's sizes do not fit its shared memory segment");
		return;
	}
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
	graph.layer_ids = TsdgBulkArray(map.address, header->layer_ids);
	graph.layer_lambdas = TsdgBulkArray(map.address, header->layer_lambdas);
	graph.layer_nodes = args->layer_nodes;
	known = TsdgImageUnreached(graph.flags, args->n, &known_count);
	status = TsdgAddResident(&args->key, &graph, NULL, &map, &error);
	if (status == TSDG_OK &&
		!TsdgFindUnreached(TsdgFindResident(&args->key), &args->check, NULL, known, known_count, &error))
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: could not check which of the newest rows of index %u/%u its searches reach, some may not be found: %s",
						args->key.database, args->key.relfilenode, error.message)));
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	TsdgUnmapBulk(&map);
	free(known);
	if (status == TSDG_OK)
		pg_atomic_fetch_add_u64(&TsdgShared->loads, 1);
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: could not load index %u/%u version " UINT64_FORMAT ": %s",
						args->key.database, args->key.relfilenode, args->key.graph_version,
						error.message)));
	TsdgIpcAnswer(t->slot, t->copy.request_id, TsdgReplyOf(status),
				  status == TSDG_OK ? NULL : error.message);
}
