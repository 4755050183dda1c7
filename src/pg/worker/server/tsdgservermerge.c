/*
 * The GPU server's merges (runs in the GPU server process): a session's
 * pending rows merged into its index's graph on the device, the old graph
 * taken from the resident copy when the session left it there, the merged
 * lists published in the session's segment as they are ready, the merged
 * graph kept resident under the key the metapage gets at the switch, and its
 * summary computed after the answer; or, past the session's
 * maintenance_work_mem, the inputs and the merged graph copied in and out of
 * a segment of one part (tsdgservermergeparts.c, tsdgserverparts.c), the
 * summary computed before the graph goes back.
 */
#include "postgres.h"

#include <unistd.h>

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

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
 * TsdgPollBuildRequest, and where the time goes: the time since the previous poll is
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

	/* the merged k-NN lists, then the search lists: the session writes them meanwhile */
	if (state->summary != NULL)
		TsdgPublishReadyLists(state->build.request, state->summary, phase, (int64) done);
	if (phase >= TSDG_PHASE_KNN_GRAPH && phase <= TSDG_PHASE_LINK)
	{
		state->seconds[state->last_phase] += (double) (now - state->last_poll) / 1000000.0;
		state->last_phase = phase;
	}
	state->last_poll = now;
	return TsdgPollBuildRequest(&state->build, phase, done, total);
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
ComputeMerge(const TsdgMergeArgs *args, const MergeArrays *a, ServerLayer *layer, MergePollState *poll,
			 TsdgError *error)
{
	TsdgBuildParams params = args->params;
	long		cores = sysconf(_SC_NPROCESSORS_ONLN);

	/*
	 * The host's part of a GPU merge (the component linking above all) leaves
	 * a core to the session, which writes the list pages meanwhile.
	 */
	if (TsdgDeviceBackend != NULL && params.threads == 0 && cores > 2)
		params.threads = (int) cores - 1;
	return tsdg_merge_graph_incremental(TsdgDeviceBackend, a->rows, a->old_index, a->old_rows_source,
										args->n_old, args->n_new, args->dims, args->metric, &params,
										a->old_knn_ids, a->old_knn_dists, a->old_neighbors,
										a->old_lambdas, a->old_changed, a->knn_ids, NULL,
										a->neighbors, a->lambdas, a->changed, layer->ids,
										layer->lambdas, MergePoll, poll, error);
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
 * evicted, or, when the session left them out of the segment (or it holds a
 * part only), into memory of this process (a->owned, freed by
 * FreeOwnedLists). False when that memory
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

	if (header->knn_ids == 0 || args->in_parts)
	{
		a->owned_knn_ids = TsdgCopyOut(a->old_knn_ids, knn_bytes);
		a->owned_neighbors = TsdgCopyOut(a->old_neighbors, list_bytes);
		a->owned_lambdas = TsdgCopyOut(a->old_lambdas, lambda_bytes);
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
KeepMergedGraph(const TsdgMergeArgs *args, MergeArrays *a, const ServerLayer *layer,
				BulkMapping *map)
{
	/* with the old rows from the worker's copy, the device has them already */
	ResidentGraph graph = {a->rows, args->n_old + args->n_new, args->dims, args->metric,
		args->params.degree, a->neighbors, a->lambdas, a->knn_ids, args->params.build_k,
		a->tids, NULL, a->merged_rows, a->merged_knn_ids,
		args->rows_resident ? &args->old_key : NULL, args->n_old,
	layer->ids, layer->lambdas, layer->nodes};
	TsdgError	error;

	a->merged_rows = NULL;
	a->merged_knn_ids = NULL;
	if (TsdgAddResident(&args->new_key, &graph, &args->old_key, map, &error) != TSDG_OK)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: the merged graph of index %u/%u stays on disk only: %s",
						args->database, args->relfilenode, error.message)));
}

/*
 * The metapage's summary of the merged graph, from its resident copy: the
 * entry points its searches start from, d_nn1+, and the new rows those
 * searches do not reach after the graph's repair for them, which the copy
 * keeps (TsdgFindUnreached; the lists the repair changes are marked in the
 * merge's changed flags). False when the graph is not resident or
 * something failed (LOG): the session then computes the summary itself,
 * with the pages' walk.
 */
static bool
SummarizeMergedGraph(const TsdgMergeArgs *args, uint8 *changed, const ServerLayer *layer,
					 const BulkMapping *map, TsdgBuildSummary *summary)
{
	ResidentIndex *r = TsdgFindResident(&args->new_key);
	uint32		entries[TSDG_SUMMARY_MAX_ENTRIES];
	TimestampTz start = GetCurrentTimestamp();
	TsdgError	error;

	TsdgLayerIntoSegment(layer, map->address, (const TsdgBulkHeader *) map->address, summary);
	if (r == NULL)
		return false;
	if (tsdg_index_summary(r->index, TSDG_SUMMARY_MAX_ENTRIES, entries, &summary->nn1_bound,
						   &error) != TSDG_OK ||
		!TsdgFindUnreached(r, &args->check, changed, NULL, 0, &error))
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
					args->database, args->relfilenode, TsdgSecondsSince(start))));
	return true;
}

/*
 * A merge in parts computed: the merged graph kept resident and its summary
 * computed first, with the graph's repair for the rows its searches do not
 * reach, so that the lists sent back are those the copy keeps (the repaired
 * ones marked in changed); then the graph goes back in parts and the worker
 * answers. The copy takes the rows of own; the lists are copied, since they
 * are sent from own when no copy is kept.
 */
static void
FinishMergeInParts(TakenRequest *t, MergeArrays *a, TsdgMergePartArrays *own, ServerLayer *layer,
				   const BulkMapping *map, const TsdgBulkHeader *header)
{
	const TsdgMergeArgs *args = &t->copy.args.merge;
	TsdgBuildSummary *summary = TsdgBulkArray(map->address, header->summary);
	TsdgMergePartArrays sent = *own;
	TsdgPartStream in;
	TsdgPartStream out;
	ResidentIndex *r;
	TimestampTz start;
	bool		complete;

	(void) TsdgComputeLayer(own->rows, args->n_old + args->n_new, args->dims, args->metric,
							&args->params, args->database, args->relfilenode, layer);
	a->merged_rows = own->rows;
	a->merged_knn_ids = NULL;
	own->rows = NULL;
	KeepMergedGraph(args, a, layer, NULL);
	if (summary != NULL)
		TsdgPublishSummary(t, summary,
						   SummarizeMergedGraph(args, own->changed, layer, map, summary));
	TsdgFreeLayer(layer);
	r = TsdgFindResident(&args->new_key);
	if (r != NULL)
	{
		sent.knn_ids = r->knn_ids;
		sent.neighbors = r->neighbors;
		sent.lambdas = r->lambdas;
	}
	TsdgMergePartStreams(header, args, &sent, &in, &out);
	start = GetCurrentTimestamp();
	complete = TsdgSendParts(t, TsdgBulkArray(map->address, header->parts), map->address, &out);
	if (complete)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: sent the merged graph of index %u/%u back in %lld parts in %.3f s",
						args->database, args->relfilenode, (long long) TsdgPartCount(&out),
						TsdgSecondsSince(start))));
	TsdgIpcAnswer(t->slot, t->copy.request_id, complete ? TSDG_REPLY_OK : TSDG_REPLY_CANCELLED,
				  complete ? NULL : "the session gave the merge up");
	TsdgPinListsOf(&args->new_key);
}

/*
 * Whether a merge's row counts and list lengths are an index's and its
 * segment holds every array they size (the old lists may be left to the
 * worker's copy, the old distances, repaired flags, merged k-NN lists and
 * summary may be absent): see TsdgBulkHeader.
 */
static bool
MergeSizesFit(const TsdgMergeArgs *args, const BulkMapping *map)
{
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	int64		n_old = args->n_old;
	int64		n;
	int			build_k = args->params.build_k;
	int			degree = args->params.degree;

	if (n_old < 0 || args->n_new < 0 || n_old >= (int64) TSDG_PENDING_ROW_ID ||
		args->n_new >= (int64) TSDG_PENDING_ROW_ID)
		return false;
	n = n_old + args->n_new;
	return TsdgGraphSizesValid(n, args->dims, degree, build_k) &&
		TsdgBulkHasArray(map, header->rows, (n - header->rows_from) * args->dims, sizeof(float), false) &&
		TsdgBulkHasArray(map, header->tids, n, sizeof(ItemPointerData), false) &&
		TsdgBulkHasArray(map, header->knn_ids, n_old * build_k, sizeof(uint32), args->graph_resident) &&
		TsdgBulkHasArray(map, header->neighbors, n_old * degree, sizeof(uint32), args->graph_resident) &&
		TsdgBulkHasArray(map, header->lambdas, n_old * degree, sizeof(uint8), args->graph_resident) &&
		TsdgBulkHasArray(map, header->dists, n_old * build_k, sizeof(float), true) &&
		TsdgBulkHasArray(map, header->flags, n_old, sizeof(uint8), true) &&
		TsdgBulkHasArray(map, header->merged_knn_ids, n * build_k, sizeof(uint32), true) &&
		TsdgBulkHasArray(map, header->merged_neighbors, n * degree, sizeof(uint32), false) &&
		TsdgBulkHasArray(map, header->merged_lambdas, n * degree, sizeof(uint8), false) &&
		TsdgBulkHasArray(map, header->changed, n, sizeof(uint8), false) &&
		TsdgBulkHasArray(map, header->summary, 1, sizeof(TsdgBuildSummary), true) &&
		TsdgBulkHasArray(map, header->layer_ids, tsdg_layer_node_count(n) * degree, sizeof(uint32),
						 true) &&
		TsdgBulkHasArray(map, header->layer_lambdas, tsdg_layer_node_count(n) * degree,
						 sizeof(uint8), true);
}

/* a refusal before the merge starts: the segment unmapped, the session told why */
static void
RefuseMerge(TakenRequest *t, BulkMapping *map, TsdgMergePartArrays *own, TsdgReply reply,
			const char *why)
{
	TsdgFreeMergePartArrays(own);
	TsdgUnmapBulk(map);
	TsdgIpcAnswer(t->slot, t->copy.request_id, reply, why);
}

/*
 * The arrays of the merge: in its segment, or for a merge in parts the
 * worker's own (own), which the parts fill. False when refused.
 */
static bool
PlaceMergeArrays(TakenRequest *t, BulkMapping *map, MergeArrays *a, TsdgMergePartArrays *own)
{
	const TsdgMergeArgs *args = &t->copy.args.merge;
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;

	memset(a, 0, sizeof(MergeArrays));
	if (args->in_parts)
	{
		if (!TsdgMergePartSizesFit(args, map))
		{
			RefuseMerge(t, map, own, TSDG_REPLY_FAILED,
						"the merge's sizes do not fit its shared memory segment");
			return false;
		}
		if (!TsdgTakeMergePartArrays(args, header, own))
		{
			RefuseMerge(t, map, own, TSDG_REPLY_OUT_OF_MEMORY,
						"the GPU worker is out of host memory for the merge's arrays");
			return false;
		}
		a->rows = own->rows;
		a->tids = own->tids;
		a->old_knn_ids = own->old_knn_ids;
		a->old_knn_dists = own->old_knn_dists;
		a->old_neighbors = own->old_neighbors;
		a->old_lambdas = own->old_lambdas;
		a->old_changed = own->old_changed;
		a->knn_ids = own->knn_ids;
		a->neighbors = own->neighbors;
		a->lambdas = own->lambdas;
		a->changed = own->changed;
		return true;
	}
	a->rows = TsdgBulkArray(map->address, header->rows);
	a->old_knn_ids = TsdgBulkArray(map->address, header->knn_ids);
	a->old_knn_dists = TsdgBulkArray(map->address, header->dists);
	a->old_neighbors = TsdgBulkArray(map->address, header->neighbors);
	a->old_lambdas = TsdgBulkArray(map->address, header->lambdas);
	a->old_changed = TsdgBulkArray(map->address, header->flags);
	a->tids = TsdgBulkArray(map->address, header->tids);
	a->knn_ids = TsdgBulkArray(map->address, header->merged_knn_ids);
	a->neighbors = TsdgBulkArray(map->address, header->merged_neighbors);
	a->lambdas = TsdgBulkArray(map->address, header->merged_lambdas);
	a->changed = TsdgBulkArray(map->address, header->changed);
	if (header->rows_from != 0 && (header->rows_from != args->n_old || !args->rows_resident))
	{
		RefuseMerge(t, map, own, TSDG_REPLY_FAILED,
					"the merge's segment leaves out old rows the session does not leave to the GPU worker");
		return false;
	}
	if (!MergeSizesFit(args, map))
	{
		RefuseMerge(t, map, own, TSDG_REPLY_FAILED,
					"the merge's sizes do not fit its shared memory segment");
		return false;
	}
	return true;
}

void
TsdgServeMerge(TakenRequest *t)
{
	const TsdgMergeArgs *args = &t->copy.args.merge;
	BulkMapping map;
	TsdgBulkHeader *header;
	MergeArrays a;
	ResidentIndex *old_graph;
	MergePollState poll;
	TsdgBuildSummary *summary;
	TsdgMergePartArrays own;
	ServerLayer layer;
	BulkMapping segment;
	TsdgError	error;
	TsdgStatus	status;
	TimestampTz start;

	t->done = true;
	memset(&own, 0, sizeof(own));
	if (!TsdgMapBulk(&t->copy, &map))
	{
		TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_FAILED,
					  "the GPU worker could not map the merge's shared memory segment");
		return;
	}
	header = (TsdgBulkHeader *) map.address;
	if (!PlaceMergeArrays(t, &map, &a, &own))
		return;
	old_graph = TsdgFindResident(&args->old_key);
	if ((args->rows_resident || args->graph_resident) && !TakeOldGraph(args, old_graph, &a))
	{
		RefuseMerge(t, &map, &own, TSDG_REPLY_NOT_RESIDENT,
					"the GPU worker no longer holds the index's graph");
		return;
	}
	/* the graphs before the one merged are stale: their memory goes to this merge's arrays */
	if (old_graph != NULL)
		TsdgDropOlderGraphs(old_graph);
	if (!args->in_parts && !TakeMergedArrays(args, header, map.address, &a))
	{
		GiveBackMergedArrays(&a);
		RefuseMerge(t, &map, &own, TSDG_REPLY_OUT_OF_MEMORY,
					"the GPU worker is out of host memory for the merged graph");
		return;
	}
	TsdgIpcSetServerState(TSDG_SERVER_BUSY, NULL, NULL);
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: merging %lld rows into the graph of %lld rows of index %u/%u on %s%s%s",
					(long long) args->n_new, (long long) args->n_old, args->database,
					args->relfilenode, tsdg_backend_name(TsdgDeviceBackend),
					args->graph_resident ? ", the old graph from its copy" :
					args->rows_resident ? ", the old rows from its copy of the graph" : "",
					args->in_parts ? ", in parts" : "")));
	if (args->in_parts)
	{
		TsdgPartStream in;
		TsdgPartStream out;

		TsdgMergePartStreams(header, args, &own, &in, &out);
		start = GetCurrentTimestamp();
		if (!TsdgReceiveParts(t, TsdgBulkArray(map.address, header->parts), map.address, &in))
		{
			TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
			RefuseMerge(t, &map, &own, TSDG_REPLY_CANCELLED, "the session gave the merge up");
			return;
		}
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: received the merge of index %u/%u through a shared memory segment of %zu bytes (parts: %lld, of up to %lld rows) in %.3f s",
						args->database, args->relfilenode, map.size, (long long) TsdgPartCount(&in),
						(long long) header->capacity, TsdgSecondsSince(start))));
	}
	memset(&poll, 0, sizeof(poll));
	poll.build.request = t;
	poll.last_poll = start = GetCurrentTimestamp();
	poll.last_phase = TSDG_PHASE_KNN_GRAPH;
	/* in parts the session reads no list before the answer */
	poll.summary = args->in_parts ? NULL : TsdgBulkArray(map.address, header->summary);
	TsdgMakeRoomForLayer(args->n_old + args->n_new, &args->params, &layer);
	status = ComputeMerge(args, &a, &layer, &poll, &error);
	if (status == TSDG_ERR_OUT_OF_MEMORY && TsdgLeastRecentlyUsed() != NULL &&
		(poll.summary == NULL || pg_atomic_read_u32(&poll.summary->knn_ready) == 0))
	{
		if (!args->graph_resident || CopyOldGraphIn(args, header, map.address, &a))
		{
			TsdgEvictAll("device out of memory for a merge");
			/* the first attempt copied the old rows, whatever it returned */
			a.old_index = NULL;
			a.old_rows_source = NULL;
			memset(poll.seconds, 0, sizeof(poll.seconds));
			poll.last_poll = start = GetCurrentTimestamp();
			status = ComputeMerge(args, &a, &layer, &poll, &error);
		}
	}
	FreeOwnedLists(&a);
	/* the rest, since the last poll, belongs to the last phase seen */
	poll.seconds[poll.last_phase] += TsdgSecondsSince(poll.last_poll);
	if (status != TSDG_OK)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: merge for index %u/%u %s: %s",
						args->database, args->relfilenode,
						status == TSDG_ERR_CANCELLED ? "cancelled" : "failed", error.message)));
		TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
		TsdgFreeLayer(&layer);
		GiveBackMergedArrays(&a);
		RefuseMerge(t, &map, &own, TsdgReplyOf(status), error.message);
		return;
	}
	TsdgLayerWritten(&layer, args->n_old + args->n_new);
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: merged index %u/%u (%lld + %lld rows) in %.3f s: "
					"k-NN graph of the new rows %.3f s, old lists' distances and GGM %.3f s, "
					"diversification %.3f s, search lists out and component linking %.3f s",
					args->database, args->relfilenode, (long long) args->n_old,
					(long long) args->n_new, TsdgSecondsSince(start),
					poll.seconds[TSDG_PHASE_KNN_GRAPH], poll.seconds[TSDG_PHASE_MERGE],
					poll.seconds[TSDG_PHASE_DIVERSIFY], poll.seconds[TSDG_PHASE_LINK]),
			 errdetail("%s Each phase as the progress polls saw it, at its start and 50 ms apart.",
					   TsdgDeviceBackend != NULL ?
					   "On the device, the rows and lists kept there from the old lists' distances "
					   "through diversification; the k-NN lists and the search graph copied back after GGM "
					   "and after diversification." :
					   "The incremental merge of the CPU backend.")));

	if (args->in_parts)
	{
		FinishMergeInParts(t, &a, &own, &layer, &map, header);
		TsdgFreeMergePartArrays(&own);
		TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
		TsdgUnmapBulk(&map);
		return;
	}

	/* every search list is in the segment, whether or not the merge published them as it went */
	if (poll.summary != NULL)
	{
		pg_write_barrier();
		pg_atomic_write_u64(&poll.summary->lists_ready, (uint64) (args->n_old + args->n_new));
	}
	/* answer first: the session writes its pages while the summary is computed and the graph kept */
	TsdgIpcAnswer(t->slot, t->copy.request_id, TSDG_REPLY_OK, NULL);
	(void) TsdgComputeLayer(a.rows, args->n_old + args->n_new, args->dims, args->metric,
							&args->params, args->database, args->relfilenode, &layer);
	/* the resident copy may take the segment over, the summary with it */
	summary = header->summary != 0 ? TsdgBulkArray(map.address, header->summary) : NULL;
	segment = map;
	KeepMergedGraph(args, &a, &layer, &map);
	if (summary != NULL)
		TsdgPublishSummary(t, summary, SummarizeMergedGraph(args, a.changed, &layer, &segment,
															summary));
	TsdgFreeLayer(&layer);
	TsdgPinListsOf(&args->new_key);
	TsdgIpcSetServerState(TSDG_SERVER_READY, NULL, NULL);
	TsdgUnmapBulk(&map);
}
