/*
 * The GPU server's builds (runs in the GPU server process): a CREATE INDEX's
 * graph built on the device from the rows in the session's segment (or, in
 * parts, copied out of it: tsdgserverparts.c), polled for the session's
 * cancel, its navigating layer written beside the build's check, answered
 * before the metapage's summary is computed, then kept resident. The poll
 * here also serves merges.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/* Sends searches that arrive during a build or merge to the CPU instead of making them wait. */
void
TsdgTurnAwaySearches(void)
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
	TsdgTurnAwaySearches();
	return TsdgServerShutdownRequested || TsdgIpcCancelRequested(t->slot, t->copy.request_id);
}

/*
 * A build's poll: TsdgPollBuildRequest, and TsdgPublishReadyLists, so that
 * the session writes the pages of the lists out while the worker goes on.
 * summary is NULL for a build in parts, whose lists are the worker's own
 * until they are sent back.
 */
typedef struct BuildSegmentPollState
{
	BuildPollState build;
	TsdgBuildSummary *summary;
	int64		n;
} BuildSegmentPollState;

static bool
BuildSegmentPoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	BuildSegmentPollState *state = (BuildSegmentPollState *) arg;

	if (state->summary != NULL)
		TsdgPublishReadyLists(state->build.request, state->summary, phase, Min((int64) done, state->n));
	return TsdgPollBuildRequest(&state->build, phase, done, total);
}

/*
 * What a session's segment learns while the worker computes (a build's or a
 * merge's): knn_ready once the builder is past TSDG_PHASE_KNN_GRAPH, its
 * k-NN lists final, and at TSDG_PHASE_LINK lists_ready, the first `lists`
 * search lists out; the session's latch is set when either is new.
 */
void
TsdgPublishReadyLists(TakenRequest *request, TsdgBuildSummary *summary, TsdgBuildPhase phase,
					  int64 lists)
{
	bool		news = false;

	if (phase != TSDG_PHASE_DIVERSIFY && phase != TSDG_PHASE_LINK)
		return;
	pg_write_barrier();
	if (pg_atomic_read_u32(&summary->knn_ready) == 0)
	{
		pg_atomic_write_u32(&summary->knn_ready, 1);
		news = true;
	}
	if (phase == TSDG_PHASE_LINK && (uint64) lists > pg_atomic_read_u64(&summary->lists_ready))
	{
		pg_atomic_write_u64(&summary->lists_ready, (uint64) lists);
		news = true;
	}
	if (news && request->copy.requester_latch != NULL)
		SetLatch(request->copy.requester_latch);
}

/*
 * The graph of the build's rows into its arrays: with changed (a segment's),
 * its search lists go out before the build's check (tsdg_build_graph_marked).
 * Where layer has room, the build writes the layer its check walked from.
 */
static TsdgStatus
BuildGraph(const TsdgBuildArgs *args, const BuildArrays *arrays, uint32 *knn_ids, uint8 *changed,
		   ServerLayer *layer, BuildSegmentPollState *poll, TsdgError *error)
{
	if (changed != NULL)
		return tsdg_build_graph_marked(TsdgDeviceBackend, arrays->rows, args->n, args->dims,
									   args->metric, &args->params, arrays->neighbors,
									   arrays->lambdas, knn_ids, NULL, changed, layer->ids,
									   layer->lambdas, BuildSegmentPoll, poll, error);
	if (layer->ids != NULL)
		return tsdg_build_graph_with_layer(TsdgDeviceBackend, arrays->rows, args->n, args->dims,
										   args->metric, &args->params, arrays->neighbors,
										   arrays->lambdas, knn_ids, NULL, layer->ids,
										   layer->lambdas, BuildSegmentPoll, poll, error);
	return tsdg_build_graph(TsdgDeviceBackend, arrays->rows, args->n, args->dims, args->metric,
							&args->params, arrays->neighbors, arrays->lambdas, knn_ids, NULL,
							BuildSegmentPoll, poll, error);
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

/*
 * Waits for the session to link the build's rings of identical rows into the
 * segment's lists, which it does once it has the answer, so that the summary
 * and the resident copy read the lists it writes to its pages. Gives up when
 * the session is gone (its latch has another owner) or the server stops.
 */
static void
AwaitRings(TakenRequest *t, TsdgBuildSummary *summary, const TsdgIndexKey *key)
{
	Latch	   *latch = t->copy.requester_latch;
	int			owner = latch != NULL ? latch->owner_pid : 0;
	TimestampTz start = GetCurrentTimestamp();
	uint32		state;

	while ((state = pg_atomic_read_u32(&summary->rings)) == TSDG_RINGS_UNKNOWN ||
		   state == TSDG_RINGS_PENDING)
	{
		if (latch == NULL || latch->owner_pid != owner || TsdgServerShutdownRequested)
		{
			ereport(LOG,
					(errmsg("pg_tsdg GPU worker: index %u/%u: the session left before linking its identical rows",
							key->database, key->relfilenode)));
			return;
		}
		pg_usleep(1000L);
	}
	pg_read_barrier();
	if (state == TSDG_RINGS_LINKED)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: index %u/%u: the session linked its rings of identical rows %.3f s after the answer",
						key->database, key->relfilenode, TsdgSecondsSince(start))));
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

/*
 * Whether the build's arrays lie inside its segment: for n rows, or for a
 * build in parts one part (capacity rows, at least one) and the turns.
 */
static bool
BuildSizesFit(const TsdgBuildArgs *args, const BulkMapping *map)
{
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	int64		rows = args->in_parts ? Min(args->n, header->capacity) : args->n;

	return (args->in_parts ? header->capacity >= 1 : args->n <= header->capacity) &&
		TsdgGraphSizesValid(args->n, args->dims, args->params.degree, args->params.build_k) &&
		TsdgBulkHasArray(map, header->rows, rows * args->dims, sizeof(float), false) &&
		TsdgBulkHasArray(map, header->tids, rows, sizeof(ItemPointerData), false) &&
		TsdgBulkHasArray(map, header->neighbors, rows * args->params.degree, sizeof(uint32), false) &&
		TsdgBulkHasArray(map, header->lambdas, rows * args->params.degree, sizeof(uint8), false) &&
		TsdgBulkHasArray(map, header->knn_ids, rows * args->params.build_k, sizeof(uint32), false) &&
		TsdgBulkHasArray(map, header->changed, rows, sizeof(uint8), true) &&
		TsdgBulkHasArray(map, header->summary, 1, sizeof(TsdgBuildSummary), true) &&
		TsdgBulkHasArray(map, header->parts, 1, sizeof(TsdgPartTurns), !args->in_parts) &&
		TsdgBulkHasArray(map, header->layer_ids, tsdg_layer_node_count(args->n) * args->params.degree,
						 sizeof(uint32), true) &&
		TsdgBulkHasArray(map, header->layer_lambdas,
						 tsdg_layer_node_count(args->n) * args->params.degree, sizeof(uint8), true);
}

/*
 * The rows of a build in parts, received into arrays of the worker's own:
 * OK, OUT_OF_MEMORY, or CANCELLED when the session gave the build up first.
 */
static TsdgReply
ReceiveBuildRows(TakenRequest *t, const BulkMapping *map, BuildArrays *arrays,
				 TsdgPartStream *out)
{
	const TsdgBuildArgs *args = &t->copy.args.build;
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	Size		n = (Size) args->n;
	TsdgBuildPartArrays local;
	TsdgPartStream in;
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

	local = (TsdgBuildPartArrays) {arrays->rows, arrays->tids, arrays->neighbors, arrays->lambdas,
	arrays->knn_ids};
	TsdgBuildPartStreams(header, args->n, args->dims, &args->params, &local, &in, out);
	if (!TsdgReceiveParts(t, TsdgBulkArray(map->address, header->parts), map->address, &in))
		return TSDG_REPLY_CANCELLED;
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: received the %lld rows of index %u/%u through a shared memory segment of %zu bytes (parts: %lld, of up to %lld rows) in %.3f s",
					(long long) args->n, args->key.database, args->key.relfilenode, map->size,
					(long long) TsdgPartCount(&in), (long long) header->capacity,
					TsdgSecondsSince(start))));
	return TSDG_REPLY_OK;
}

/* what of the arrays ReceiveBuildRows took is still the build's */
static void
FreeBuildArrays(BuildArrays *arrays)
{
	TsdgGiveBackHostArray(arrays->rows);
	TsdgGiveBackHostArray(arrays->knn_ids);
	free(arrays->tids);
	free(arrays->neighbors);
	free(arrays->lambdas);
	memset(arrays, 0, sizeof(BuildArrays));
}

/*
 * Keeps the graph just built resident; a build in parts gives its rows and
 * k-NN lists to the copy, which copies the rest, else the copy lies in the
 * segment, whose mapping it takes.
 */
static void
KeepResident(const TsdgBuildArgs *args, BuildArrays *arrays, const ServerLayer *layer,
			 BulkMapping *map)
{
	ResidentGraph graph = {arrays->rows, args->n, args->dims, args->metric, args->params.degree,
		arrays->neighbors, arrays->lambdas, arrays->knn_ids, args->params.build_k,
	arrays->tids, NULL};
	TsdgError	load_error;

	graph.layer_ids = layer->ids;
	graph.layer_lambdas = layer->lambdas;
	graph.layer_nodes = layer->nodes;

	if (args->in_parts)
	{
		graph.own_rows = arrays->rows;
		graph.own_knn_ids = arrays->knn_ids;
		arrays->rows = NULL;
		arrays->knn_ids = NULL;
	}
	if (TsdgAddResident(&args->key, &graph, NULL, args->in_parts ? NULL : map,
						&load_error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: the new graph of index %u/%u stays on disk only: %s",
						args->key.database, args->key.relfilenode, load_error.message)));
	TsdgPinListsOf(&args->key);
}

void
TsdgServeBuild(TakenRequest *t)
{
	const TsdgBuildArgs *args = &t->copy.args.build;
	BulkMapping map;
	TsdgBulkHeader *header;
	TsdgError	error;
	TsdgStatus	status;
	BuildSegmentPollState poll = {{t}, NULL, 0};
	uint8	   *changed = NULL;
	TimestampTz start;
	BuildArrays arrays;
	TsdgPartStream graph_out;
	TsdgReply	received = TSDG_REPLY_OK;
	ServerLayer layer;

	t->done = true;
	if (!TsdgMapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the build's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	if (!BuildSizesFit(args, &map))
	{
		TsdgUnmapBulk(&map);
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the build's sizes do not fit its shared memory segment");
		return;
	}
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	if (args->in_parts)
		received = ReceiveBuildRows(t, &map, &arrays, &graph_out);
	else
	{
		arrays.rows = TsdgBulkArray(map.address, header->rows);
		arrays.tids = TsdgBulkArray(map.address, header->tids);
		arrays.neighbors = TsdgBulkArray(map.address, header->neighbors);
		arrays.lambdas = TsdgBulkArray(map.address, header->lambdas);
		arrays.knn_ids = TsdgBulkArray(map.address, header->knn_ids);
	}
	if (received != TSDG_REPLY_OK)
	{
		FreeBuildArrays(&arrays);
		TsdgIpcAnswer(t->slot, t->copy.request_id, received,
					  received == TSDG_REPLY_OUT_OF_MEMORY ?
					  "out of host memory for the build's rows" : "the session gave the build up");
		TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
		TsdgUnmapBulk(&map);
		return;
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: building the graph of %lld rows of %d dimensions for index %u/%u on %s",
					(long long) args->n, args->dims, args->key.database, args->key.relfilenode,
					tsdg_backend_name(TsdgDeviceBackend))));
	start = GetCurrentTimestamp();
	if (!args->in_parts)
	{
		poll.summary = TsdgBulkArray(map.address, header->summary);
		changed = TsdgBulkArray(map.address, header->changed);
	}
	poll.n = args->n;
	TsdgEvictForBuild(args->n, args->dims, &args->params);
	TsdgMakeRoomForLayer(args->n, &args->params, &layer);
	status = BuildGraph(args, &arrays, arrays.knn_ids, changed, &layer, &poll, &error);
	/* not once the session may be writing out search lists: it would miss the new ones */
	if (status == TSDG_ERR_OUT_OF_MEMORY && TsdgLeastRecentlyUsed() != NULL &&
		(poll.summary == NULL || pg_atomic_read_u64(&poll.summary->lists_ready) == 0))
	{
		/*
		 * Nor are k-NN lists it may be writing out written again: they are a
		 * k-NN graph of the same rows, which the next merge reads as it would
		 * the lists of this attempt.
		 */
		bool		knn_kept = poll.summary != NULL &&
			pg_atomic_read_u32(&poll.summary->knn_ready) != 0;

		TsdgEvictAll("device out of memory for a build");
		status = BuildGraph(args, &arrays, knn_kept ? NULL : arrays.knn_ids, changed, &layer, &poll,
							&error);
	}
	if (status == TSDG_OK && args->in_parts)
	{
		TimestampTz sent = GetCurrentTimestamp();

		if (!TsdgSendParts(t, TsdgBulkArray(map.address, header->parts), map.address, &graph_out))
		{
			status = TSDG_ERR_CANCELLED;
			strlcpy(error.message, "the session gave the build up", sizeof(error.message));
		}
		else
			ereport(LOG,
					(errmsg("pg_tsdg GPU worker: sent the graph of index %u/%u back in %lld parts in %.3f s",
							args->key.database, args->key.relfilenode,
							(long long) TsdgPartCount(&graph_out), TsdgSecondsSince(sent))));
	}
	if (status == TSDG_OK)
	{
		TsdgLayerWritten(&layer, args->n);
		pg_atomic_fetch_add_u64(&TsdgShared->builds, 1);
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: built the graph of index %u/%u in %.3f s",
						args->key.database, args->key.relfilenode, TsdgSecondsSince(start))));
		/*
		 * answer first: the session writes its pages while the summary (and
		 * the layer, where the build had no room for it) is computed and the
		 * graph uploaded
		 */
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, NULL);
		(void) TsdgComputeLayer(arrays.rows, args->n, args->dims, args->metric, &args->params,
								args->key.database, args->key.relfilenode, &layer);
		if (header->summary != 0)
		{
			TsdgBuildSummary *summary = TsdgBulkArray(map.address, header->summary);

			if (!args->in_parts)
				AwaitRings(t, summary, &args->key);
			TsdgLayerIntoSegment(&layer, map.address, header, summary);
			TsdgPublishSummary(t, summary,
							   ComputeSummary(summary, arrays.rows, args->n, args->dims, args->metric,
											  arrays.neighbors, args->params.degree,
											  args->key.database, args->key.relfilenode));
		}
		if (args->key.relfilenode != InvalidOid && TsdgFindResident(&args->key) == NULL)
			KeepResident(args, &arrays, &layer, &map);
	}
	else
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: build for index %u/%u %s: %s",
						args->key.database, args->key.relfilenode,
						status == TSDG_ERR_CANCELLED ? "cancelled" : "failed", error.message)));
		TsdgIpcAnswer(t->slot, t->copy.request_id, TsdgReplyOf(status), error.message);
	}
	TsdgFreeLayer(&layer);
	if (args->in_parts)
		FreeBuildArrays(&arrays);
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	TsdgUnmapBulk(&map);
}
