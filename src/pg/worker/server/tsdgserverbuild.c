/*
 * The GPU server's builds (runs in the GPU server process): a CREATE INDEX's
 * graph built on the device from the rows in the session's segment, polled
 * for the session's cancel, answered before the metapage's summary is
 * computed, then kept resident. The poll here also serves merges.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

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
			TsdgIpcAnswer(slot, copy.request_id, TSDG_REPLY_BUSY, NULL);
	}
}

bool
TsdgPollBuildRequest(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	BuildPollState *state = (BuildPollState *) arg;
	TakenRequest *t = state->request;

	TsdgIpcReportProgress(t->slot, t->copy.request_id, (int) phase, done, total);
	TurnAwaySearches();
	return TsdgServerShutdownRequested || TsdgIpcCancelRequested(t->slot, t->copy.request_id);
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
						database, relfilenode, TsdgSecondsSince(start))));
	}
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: no entry points for index %u/%u, the session computes them: %s",
						database, relfilenode, error.message)));
	return ok;
}

/* The summary is ready (or failed): the session waiting for it goes on. */
void
TsdgPublishSummary(TakenRequest *t, TsdgBuildSummary *summary, bool ok)
{
	pg_write_barrier();
	pg_atomic_write_u32(&summary->state, ok ? TSDG_SUMMARY_READY : TSDG_SUMMARY_FAILED);
	if (t->copy.requester_latch != NULL)
		SetLatch(t->copy.requester_latch);
}

void
TsdgServeBuild(TakenRequest *t)
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
	if (!TsdgMapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the build's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	rows = TsdgBulkArray(map.address, header->rows);
	neighbors = TsdgBulkArray(map.address, header->neighbors);
	lambdas = TsdgBulkArray(map.address, header->lambdas);
	knn_ids = TsdgBulkArray(map.address, header->knn_ids);
	if (args->n > header->capacity ||
		!TsdgGraphSizesValid(args->n, args->dims, args->params.degree, args->params.build_k) ||
		!TsdgBulkHasArray(&map, header->rows, args->n * args->dims, sizeof(float), false) ||
		!TsdgBulkHasArray(&map, header->tids, args->n, sizeof(ItemPointerData), false) ||
		!TsdgBulkHasArray(&map, header->neighbors, args->n * args->params.degree, sizeof(uint32), false) ||
		!TsdgBulkHasArray(&map, header->lambdas, args->n * args->params.degree, sizeof(uint8), false) ||
		!TsdgBulkHasArray(&map, header->knn_ids, args->n * args->params.build_k, sizeof(uint32), false) ||
		!TsdgBulkHasArray(&map, header->summary, 1, sizeof(TsdgBuildSummary), true))
	{
		TsdgUnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the build's sizes do not fit its shared memory segment");
		return;
	}
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: building the graph of %lld rows of %d dimensions for index %u/%u on %s",
					(long long) args->n, args->dims, args->key.database, args->key.relfilenode,
					tsdg_backend_name(TsdgDeviceBackend))));
	start = GetCurrentTimestamp();
	status = tsdg_build_graph(TsdgDeviceBackend, rows, args->n, args->dims, args->metric,
							  &args->params, neighbors, lambdas, knn_ids, NULL,
							  TsdgPollBuildRequest, &poll, &error);
	if (status == TSDG_ERR_OUT_OF_MEMORY && TsdgLeastRecentlyUsed() != NULL)
	{
		TsdgEvictAll("device out of memory for a build");
		status = tsdg_build_graph(TsdgDeviceBackend, rows, args->n, args->dims, args->metric,
								  &args->params, neighbors, lambdas, knn_ids, NULL,
								  TsdgPollBuildRequest, &poll, &error);
	}
	if (status == TSDG_OK)
	{
		pg_atomic_fetch_add_u64(&TsdgShared->builds, 1);
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: built the graph of index %u/%u in %.3f s",
						args->key.database, args->key.relfilenode, TsdgSecondsSince(start))));
		/* answer first: the session writes its pages while the summary is computed and the graph uploaded */
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, NULL);
		if (header->summary != 0)
		{
			TsdgBuildSummary *summary = TsdgBulkArray(map.address, header->summary);

			TsdgPublishSummary(t, summary,
						   ComputeSummary(summary, rows, args->n, args->dims, args->metric,
										  neighbors, args->params.degree, args->key.database,
										  args->key.relfilenode));
		}
		if (args->key.relfilenode != InvalidOid && TsdgFindResident(&args->key) == NULL)
		{
			ResidentGraph graph = {rows, args->n, args->dims, args->metric, args->params.degree,
				neighbors, lambdas, knn_ids, args->params.build_k,
			TsdgBulkArray(map.address, header->tids), NULL};
			TsdgError	load_error;

			if (TsdgAddResident(&args->key, &graph, NULL, &map, &load_error) != TSDG_OK)
				ereport(LOG,
						(errmsg("pg_tsdg GPU worker: the new graph of index %u/%u stays on disk only: %s",
								args->key.database, args->key.relfilenode, load_error.message)));
			TsdgPinListsOf(&args->key);
		}
	}
	else
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: build for index %u/%u %s: %s",
						args->key.database, args->key.relfilenode,
						status == TSDG_ERR_CANCELLED ? "cancelled" : "failed", error.message)));
		TsdgIpcAnswer(t->slot, t->copy.request_id, TsdgReplyOf(status), error.message);
	}
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	TsdgUnmapBulk(&map);
}
