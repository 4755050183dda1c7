/*
 * CREATE INDEX for tsdg: the heap is scanned into (TID, vector) arrays (in
 * the shared memory segment the GPU worker reads, when it runs), a graph
 * builder turns the rows into the TSDG graph
 * (on the GPU worker when it runs, else the CPU backend of the core; see
 * TsdgComputeGraph), the row pages, the list pages and the k-NN pages (for
 * merges: tsdgmerge.c) are written in node order and WAL-logged as whole
 * pages as they are filled, and the metapage is written last, with the entry
 * points and statistics the worker computed meanwhile. A LOG line says where
 * the time went. The navigating layer is computed by the builder of the
 * graph after it, its pages written with the region's. The heap scan and its
 * arrays: tsdgbuildscan.c (shared with
 * parallel workers: tsdgbuildparallel.c); the pages, on the worker each as
 * soon as its segment holds what they need: tsdgbuildpages.c.
 *
 * A build never fails for lack of maintenance_work_mem. Within it, the
 * arrays are local memory. Past it, a NOTICE says so and the build goes on
 * with its large arrays, and the core's own, in temporary files
 * (tsdgspill.c), so that this backend's private memory stays bounded; the
 * kernel keeps their pages in its cache while memory is free and writes them
 * out when it is short. A build on the GPU worker does the same past it:
 * the rows go from those files to the worker in parts, through a segment
 * that maintenance_work_mem bounds, and the graph comes back the same way
 * (tsdgoffloadbuildparts.c); the worker's own copy of the rows is its working
 * memory, as the GPU's is.
 */
#include "postgres.h"

#include <math.h>

#include "access/xloginsert.h"
#include "catalog/pg_control.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgbuild.h"
#include "tsdgworkerclient.h"




/*
 * Called by the core about every 50 ms from this backend's own thread while
 * its threads build. Must not ereport: it only reports progress and asks the
 * core to stop when an interrupt that would cancel the query is pending.
 */
static bool
TsdgBuildPoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	TsdgBuildState *bs = (TsdgBuildState *) arg;
	int			progress_phase = phase == TSDG_PHASE_DIVERSIFY || phase == TSDG_PHASE_LINK ?
		TSDG_PROGRESS_DIVERSIFY : TSDG_PROGRESS_KNN;

	if (progress_phase != bs->reported_phase || done != bs->reported_done)
	{
		const int	index[] = {PROGRESS_CREATEIDX_SUBPHASE,
			PROGRESS_CREATEIDX_TUPLES_TOTAL,
		PROGRESS_CREATEIDX_TUPLES_DONE};
		const int64 value[] = {progress_phase, total, done};

		pgstat_progress_update_multi_param(3, index, value);
		bs->reported_phase = progress_phase;
		bs->reported_done = done;
	}

	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

static void
TsdgReportCoreError(TsdgStatus status, const TsdgError *error, const char *what)
{
	switch (status)
	{
		case TSDG_OK:
			return;
		case TSDG_ERR_CANCELLED:
			CHECK_FOR_INTERRUPTS();
			/* the interrupt was held off: still stop, as the user asked */
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling tsdg %s", what)));
			break;
		case TSDG_ERR_OUT_OF_MEMORY:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory during tsdg %s", what),
					 errdetail("%s", error->message)));
			break;
		case TSDG_ERR_INVALID_ARGUMENT:
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid argument to tsdg %s: %s", what, error->message)));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("tsdg %s failed: %s", what, error->message)));
	}
}

/*
 * The graph builder: fills neighbors/lambdas and the k-NN ids (count rows).
 * The GPU worker builds it when it runs (the rows are in the segment it
 * reads, or past maintenance_work_mem go to it in parts through a segment
 * made here); else, or when the worker cannot (no DSM, GPU out of memory),
 * the CPU backend of the core does the work in this backend's process.
 * tsdg.device = gpu without a worker is refused rather than silently run on
 * the CPU. Returns true when the worker built the graph.
 */
static bool
TsdgComputeGraph(TsdgBuildState *bs, uint32 *neighbors, uint8 *lambdas)
{
	TsdgError	error;
	TsdgStatus	status;
	int64		layer_nodes;

	if (tsdg_device == TSDG_DEVICE_GPU && !TsdgWorkerUsable())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tsdg.device is \"gpu\" but no GPU worker is available"),
				 errhint("SET tsdg.device = auto or cpu to build on the CPU.")));
	if (tsdg_device == TSDG_DEVICE_GPU && !TsdgWorkerComputes(bs->metric, false))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("tsdg.device is \"gpu\" but the GPU worker does not compute %s distances",
						TsdgMetricName(bs->metric)),
				 errhint("SET tsdg.device = auto or cpu to build on the CPU.")));

	if (bs->in_parts && TsdgWorkerAwaitRequest())
	{
		TsdgLocalBuildArrays local = {bs->rows, bs->tids, neighbors, lambdas, bs->knn_ids};

		if (TsdgBuildSegmentCreateInParts(&bs->segment, bs->memory_limit, bs->count, bs->dims,
										  &bs->params, &local))
		{
			bs->segment.while_building = TsdgWriteBuildRows;
			bs->segment.hook_arg = bs;
		}
	}

	/* the worker declines (with a WARNING where it matters) and the CPU builds */
	if (TsdgWorkerBuildGraph(bs->index, &bs->segment, bs->count, bs->dims, bs->metric,
							 &bs->params, TsdgBuildPoll, bs, &status, &error))
	{
		TsdgReportCoreError(status, &error, "index build");
		return true;
	}
	/* pages of a worker that gave up are written again from the CPU's lists */
	bs->knn_written = false;
	bs->list_pages_written = 0;

	/*
	 * The pages keep the k-NN ids only, not their distances. The build's
	 * check walks from the navigating layer, which it builds first: it is
	 * kept here rather than built again.
	 */
	layer_nodes = tsdg_layer_node_count(bs->count);
	if (layer_nodes > 0)
	{
		bs->layer_ids = palloc(sizeof(uint32) * bs->params.degree * layer_nodes);
		bs->layer_lambdas = palloc(sizeof(uint8) * bs->params.degree * layer_nodes);
	}
	status = tsdg_build_graph_with_layer(NULL, bs->rows, bs->count, bs->dims, bs->metric, &bs->params,
										 neighbors, lambdas, bs->knn_ids, NULL,
										 bs->layer_ids, bs->layer_lambdas, TsdgBuildPoll, bs, &error);
	TsdgReportCoreError(status, &error, "index build");
	bs->layer_with_graph = layer_nodes > 0;
	return false;
}

/* the layer's poll: the cancel only, its phase is reported before it starts */
static bool
TsdgLayerPoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

/*
 * The navigating layer, here on the CPU: the worker computes it beside its
 * summary when it built the graph, and this is the fallback where it did
 * not.
 */
static void
TsdgComputeBuildLayer(TsdgBuildState *bs)
{
	int64		layer_nodes = tsdg_layer_node_count(bs->count);
	TimestampTz start = GetCurrentTimestamp();
	TsdgError	error;
	TsdgStatus	status;

	bs->layer_on_worker = false;
	if (layer_nodes == 0 || bs->layer_with_graph)
		return;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, TSDG_PROGRESS_LAYER);
	bs->layer_ids = palloc(sizeof(uint32) * bs->params.degree * layer_nodes);
	bs->layer_lambdas = palloc(sizeof(uint8) * bs->params.degree * layer_nodes);
	status = tsdg_build_layer(NULL, bs->rows, bs->count, bs->dims, bs->metric, &bs->params,
							  bs->layer_ids, bs->layer_lambdas, TsdgLayerPoll, NULL, &error);
	TsdgReportCoreError(status, &error, "navigating layer build");
	bs->layer_seconds = SECS(start, GetCurrentTimestamp());
}

static void
TsdgFillMeta(TsdgMetaPageData *meta, const TsdgBuildState *bs, const TsdgLayout *layout)
{
	MemSet(meta, 0, sizeof(TsdgMetaPageData));
	meta->magic = TSDG_MAGIC_NUMBER;
	meta->version = TSDG_FORMAT_VERSION;
	meta->dims = bs->dims;
	meta->metric = bs->metric;
	meta->degree = bs->params.degree;
	meta->build_k = bs->params.build_k;
	meta->samples = bs->params.samples;
	meta->iterations = bs->params.iterations;
	meta->alpha = bs->params.alpha;
	meta->lambda0 = bs->params.lambda0;
	meta->node_count = (uint32) bs->count;
	meta->row_size = (uint16) layout->row_size;
	meta->rows_per_page = (uint16) layout->rows_per_page;
	meta->list_size = (uint16) layout->list_size;
	meta->lists_per_page = (uint16) layout->lists_per_page;
	/* the rows from block 1, then the lists, then the k-NN lists */
	meta->row_extent_count = 1;
	meta->row_extents[0].first = 0;
	meta->row_extents[0].start = TSDG_METAPAGE_BLKNO + 1;
	meta->row_extents[0].blocks = TsdgPagesFor(bs->count, layout->rows_per_page);
	meta->list_start = meta->row_extents[0].start + meta->row_extents[0].blocks;
	meta->knn_start = InvalidBlockNumber;
	meta->pending_head = InvalidBlockNumber;
	meta->pending_tail = InvalidBlockNumber;
	meta->graph_version = bs->count > 0 ? 1 : 0;
}

/* starts finding the groups of identical rows, unless started */
void
TsdgStartBuildDuplicates(TsdgBuildState *bs)
{
	if (bs->duplicates_started)
		return;
	TsdgStartFindingDuplicates(bs->rows, bs->count, bs->dims);
	bs->duplicates_started = true;
}

/*
 * the groups of identical rows, unless found; the worker learns whether it
 * is to wait for their rings after its answer
 */
void
TsdgFindBuildDuplicates(TsdgBuildState *bs)
{
	TimestampTz start = GetCurrentTimestamp();

	if (bs->duplicates_found)
		return;
	TsdgStartBuildDuplicates(bs);
	bs->duplicates = TsdgFinishFindingDuplicates(&bs->duplicates_seconds);
	bs->duplicates_found = true;
	bs->duplicates_wait_seconds = SECS(start, GetCurrentTimestamp());
	TsdgBuildSegmentRingsFound(&bs->segment, bs->duplicates != NULL);
}

/*
 * The graph, and the groups of identical rows; the threads that find the
 * groups read the rows, so they stop before an error frees them.
 */
static bool
TsdgComputeGraphAndDuplicates(TsdgBuildState *bs, uint32 *neighbors, uint8 *lambdas)
{
	volatile bool on_worker = false;

	PG_TRY();
	{
		on_worker = TsdgComputeGraph(bs, neighbors, lambdas);
		TsdgFindBuildDuplicates(bs);
	}
	PG_CATCH();
	{
		TsdgStopFindingDuplicates();
		TsdgBuildSegmentRingsLinked(&bs->segment, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return on_worker;
}

/* the metapage's navigating set and the stop rule's d_nn1+ statistic */
static void
TsdgGraphSummary(TsdgBuildState *bs, TsdgMetaPageData *meta, const uint32 *neighbors)
{
	TsdgError	error;
	uint32		entries[TSDG_MAX_ENTRY_POINTS];
	TsdgStatus	status;

	status = tsdg_select_entry_points(bs->rows, bs->count, bs->dims, bs->metric,
									  neighbors, bs->params.degree, TSDG_MAX_ENTRY_POINTS,
									  entries, &error);
	TsdgReportCoreError(status, &error, "entry point selection");
	meta->entry_count = 0;
	for (int i = 0; i < TSDG_MAX_ENTRY_POINTS; i++)
		if (entries[i] != TSDG_INVALID_ID)
			meta->entry_points[meta->entry_count++] = entries[i];

	status = tsdg_graph_nn1_bound(bs->rows, bs->count, bs->dims, bs->metric,
								  neighbors, bs->params.degree, &meta->nn1_bound, &error);
	TsdgReportCoreError(status, &error, "graph statistics");
}

/* what starts the search profile once the build's entry points are in meta */
typedef struct TsdgProfileStart
{
	TsdgBuildState *bs;
	TsdgMetaPageData *meta;
	const uint32 *neighbors;
	const uint8 *lambdas;
	bool		entry_points_in;
	bool		started;
} TsdgProfileStart;

static void
TsdgStartProfile(TsdgProfileStart *start)
{
	start->started = TsdgStartArrayProfile(start->meta, start->bs->metric, start->bs->rows,
										   start->neighbors, start->lambdas, start->bs->layer_ids,
										   start->bs->layer_lambdas);
}

/* between list pages: the profile starts as soon as the worker's entry points are in */
static void
TsdgStartProfileOnceEntryPointsIn(void *arg)
{
	TsdgProfileStart *start = (TsdgProfileStart *) arg;

	if (!TsdgWorkerBuildSummaryIn(&start->bs->segment, start->meta))
		return;
	start->bs->between_list_pages = NULL;
	start->entry_points_in = true;
	TsdgStartProfile(start);
}

/* when the pages and the profile were done, for the LOG line */
typedef struct TsdgPagesAndProfile
{
	TimestampTz pages_at;		/* the pages written */
	TimestampTz summary_wait_at;	/* the worker's entry points waited for after them */
	bool		profiled;		/* meta holds the profile */
	bool		started_after_pages;	/* the worker's entry points came after the pages */
	bool		started_after_layer;	/* it walks the layer, which the worker sent after them */
	double		profile_seconds;	/* the time its threads took */
} TsdgPagesAndProfile;

/*
 * The pages of the graph, while threads of the core compute the search
 * profile from the same arrays, then the wait for them. The profile starts once the entry points are in meta: at once after
 * a graph of the CPU's, whose entry points are computed before; on the
 * worker, which computes them after its answer, between the list pages as
 * soon as they are in, else after the pages, once waited for (and computed
 * here when the worker did not). An error on the way stops the threads
 * before the arrays go.
 */
static void
TsdgWritePagesBesideProfile(TsdgBuildState *bs, TsdgMetaPageData *meta, const TsdgLayout *layout,
							const uint32 *neighbors, const uint8 *lambdas, bool on_worker,
							TsdgPagesAndProfile *done)
{
	TsdgProfileStart start = {bs, meta, neighbors, lambdas, !on_worker, false};

	if (start.entry_points_in)
		TsdgStartProfile(&start);
	else
	{
		bs->between_list_pages = TsdgStartProfileOnceEntryPointsIn;
		bs->between_arg = &start;
	}
	PG_TRY();
	{
		/* a builder that returns no k-NN lists leaves the first one empty */
		TsdgWriteGraphPages(bs, meta, layout, neighbors, lambdas,
							bs->knn_written || bs->count == 1 || bs->knn_ids[0] != TSDG_INVALID_ID);
		bs->between_list_pages = NULL;
		done->pages_at = GetCurrentTimestamp();
		done->started_after_pages = !start.entry_points_in;
		if (!start.entry_points_in)
		{
			if (!TsdgWorkerBuildSummary(&bs->segment, meta))
			{
				ereport(LOG,
						(errmsg("tsdg index \"%s\": the GPU worker did not compute the entry points, computing them here",
								RelationGetRelationName(bs->index))));
				TsdgGraphSummary(bs, meta, neighbors);
			}
			TsdgStartProfile(&start);
		}
		done->summary_wait_at = GetCurrentTimestamp();
		done->profiled = start.started && TsdgFinishArrayProfile(meta, &done->profile_seconds);
	}
	PG_CATCH();
	{
		bs->between_list_pages = NULL;
		TsdgStopArrayProfile();
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* where the heap scan put the rows, and with whom, for the LOG line */
static char *
TsdgHeapScanNote(const TsdgBuildState *bs)
{
	const char *where = bs->segment_growths > 0 ?
		psprintf("into shared memory, grown %d times", bs->segment_growths) :
		bs->use_segment ? "into shared memory" :
		bs->in_parts ? "into temporary files, for the GPU worker in parts" : NULL;
	char	   *workers = NULL;

	if (bs->parallel_workers > 0)
	{
		StringInfoData placed;

		initStringInfo(&placed);
		for (int i = 0; i <= bs->parallel_workers; i++)
			appendStringInfo(&placed, "%s%lld", i == 0 ? "" : " + ", (long long) bs->rows_placed[i]);
		workers = psprintf("with %d parallel worker%s, rows placed %s (the session's first), "
						   "%lld moved into the last chunks' empty places, %lld rows past the estimate",
						   bs->parallel_workers, bs->parallel_workers == 1 ? "" : "s", placed.data,
						   (long long) bs->rows_moved, (long long) bs->overflow_rows);
	}

	if (where != NULL && workers != NULL)
		return psprintf(" (%s, %s)", where, workers);
	return where != NULL || workers != NULL ? psprintf(" (%s)", where != NULL ? where : workers) : "";
}

IndexBuildResult *
tsdgbuild(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	TsdgBuildState bs;
	TsdgLayout	layout;
	TsdgMetaPageData meta;
	uint32	   *neighbors = NULL;
	uint8	   *lambdas = NULL;
	Buffer		metabuf;
	double		reltuples;
	TimestampTz started_at = GetCurrentTimestamp();
	TimestampTz scanned_at,
				graph_at = 0,
				summary_at = 0,
				profile_at = 0,
				wal_at;
	bool		on_worker = false;
	TsdgPagesAndProfile done = {0};

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	MemSet(&bs, 0, sizeof(bs));
	bs.heap = heap;
	bs.index = index;
	bs.metric = TsdgIndexMetric(index);
	TsdgParamsFromOptions(index, &bs.params);
	bs.dims = TsdgIndexTypmodDims(index);
	if (bs.dims > 0)
		TsdgCheckDimensions(index, bs.dims);
	bs.memory_limit = (Size) maintenance_work_mem * 1024;
	/* the rows go straight into the segment the worker reads, when it may build */
	bs.use_segment = TsdgWorkerAwaitRequest() && TsdgWorkerComputes(bs.metric, true);

	/* block 0 first, so the row pages start at block 1; filled in at the end */
	metabuf = TsdgNewBuffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == TSDG_METAPAGE_BLKNO);
	PageInit(BufferGetPage(metabuf), BLCKSZ, sizeof(TsdgPageOpaqueData));
	MarkBufferDirty(metabuf);
	UnlockReleaseBuffer(metabuf);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, TSDG_PROGRESS_LOAD);
	reltuples = TsdgScanHeap(&bs, indexInfo);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, bs.count);
	scanned_at = GetCurrentTimestamp();

	TsdgInitLayout(&layout, bs.dims, bs.params.degree, bs.count);
	TsdgFillMeta(&meta, &bs, &layout);

	if (bs.count > 0)
	{
		/* the row pages are written while the worker builds the graph */
		bs.meta = &meta;
		bs.layout = &layout;
		if (bs.segment.seg != NULL)
		{
			neighbors = bs.segment.neighbors;
			lambdas = bs.segment.lambdas;
			bs.knn_ids = bs.segment.knn_ids;
			bs.segment.while_building = TsdgWriteBuildRows;
			bs.segment.knn_ready = TsdgWriteBuildKnn;
			bs.segment.lists_ready = TsdgWriteBuildLists;
			bs.segment.hook_arg = &bs;
		}
		else
		{
			Size		neighbor_bytes = sizeof(uint32) * bs.params.degree * bs.count;
			Size		lambda_bytes = sizeof(uint8) * bs.params.degree * bs.count;
			Size		knn_bytes = sizeof(uint32) * bs.params.build_k * bs.count;

			if (bs.spill != NULL)
			{
				neighbors = TsdgSpillAlloc(bs.spill, neighbor_bytes);
				lambdas = TsdgSpillAlloc(bs.spill, lambda_bytes);
				bs.knn_ids = TsdgSpillAlloc(bs.spill, knn_bytes);
			}
			else
			{
				neighbors = MemoryContextAllocHuge(CurrentMemoryContext, neighbor_bytes);
				lambdas = MemoryContextAllocHuge(CurrentMemoryContext, lambda_bytes);
				bs.knn_ids = MemoryContextAllocHuge(CurrentMemoryContext, knn_bytes);
			}
		}
		bs.knn_ids[0] = TSDG_INVALID_ID;
		on_worker = TsdgComputeGraphAndDuplicates(&bs, neighbors, lambdas);
		TsdgLinkDuplicates(bs.duplicates, neighbors, lambdas, bs.params.degree);
		TsdgBuildSegmentRingsLinked(&bs.segment, bs.duplicates != NULL);
		graph_at = GetCurrentTimestamp();
		/* the worker computes the summary and the layer while the pages are written */
		if (!on_worker)
		{
			TsdgGraphSummary(&bs, &meta, neighbors);
			TsdgComputeBuildLayer(&bs);
		}
		summary_at = GetCurrentTimestamp();
		TsdgWritePagesBesideProfile(&bs, &meta, &layout, neighbors, lambdas, on_worker, &done);
		if (on_worker)
		{
			bs.layer_on_worker = TsdgWorkerBuildLayer(&bs.segment, bs.count, &bs.layer_ids,
													  &bs.layer_lambdas);
			if (!bs.layer_on_worker)
				TsdgComputeBuildLayer(&bs);
			/* the profile walks the layer as the scans do, so it waited for it */
			if (!done.profiled &&
				TsdgStartArrayProfile(&meta, bs.metric, bs.rows, neighbors, lambdas,
									  bs.layer_ids, bs.layer_lambdas))
			{
				done.started_after_layer = true;
				done.profiled = TsdgFinishArrayProfile(&meta, &done.profile_seconds);
			}
		}
		TsdgWriteBuildLayer(&bs, &meta, &layout);
		profile_at = GetCurrentTimestamp();
	}
	TsdgBuildSegmentRelease(&bs.segment);
	if (bs.rows_segment != NULL)
		dsm_detach(bs.rows_segment);
	if (bs.spill != NULL)
		TsdgSpillEnd(bs.spill);

	metabuf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	TsdgInitMetaPage(BufferGetPage(metabuf), &meta);
	MarkBufferDirty(metabuf);
	UnlockReleaseBuffer(metabuf);

	/* the other pages were logged as they were written */
	if (RelationNeedsWAL(index))
		log_newpage_range(index, MAIN_FORKNUM, TSDG_METAPAGE_BLKNO, TSDG_METAPAGE_BLKNO + 1, true);
	wal_at = GetCurrentTimestamp();
	if (!done.profiled)
		TsdgMeasureSearchProfile(index);

	if (bs.count > 0)
		ereport(LOG,
				(errmsg("tsdg index \"%s\" built from %lld rows in %.3f s: heap scan %.3f s%s, graph %.3f s%s, "
						"identical rows %.3f s on threads, waited for %.3f s (%lld in %lld groups), entry points and statistics %.3f s, "
						"%s pages %.3f s%s, waiting for the worker's entry points %.3f s, navigating layer of %lld nodes %s, metapage %.3f s, "
						"search profile %.3f s (%s)",
						RelationGetRelationName(index), (long long) bs.count,
						SECS(started_at, GetCurrentTimestamp()), SECS(started_at, scanned_at),
						TsdgHeapScanNote(&bs),
						SECS(scanned_at, graph_at),
						!bs.rows_written ? "" :
						psprintf(" (the row pages written meanwhile in %.3f s%s%s)", bs.rows_seconds,
								 bs.knn_written ?
								 psprintf(", the k-NN pages meanwhile in %.3f s", bs.knn_seconds) : "",
								 bs.list_pages_written > 0 ?
								 psprintf(", %u list pages meanwhile in %.3f s",
										  bs.list_pages_written, bs.lists_seconds) : ""),
						bs.duplicates_seconds, bs.duplicates_wait_seconds,
						(long long) (bs.duplicates ? bs.duplicates->rows : 0),
						(long long) (bs.duplicates ? bs.duplicates->groups : 0),
						SECS(graph_at, summary_at),
						bs.knn_written ? "list" : bs.rows_written ? "list and k-NN" : "row, list and k-NN",
						SECS(summary_at, done.pages_at),
						bs.list_pages_written == 0 ? "" :
						psprintf(" (%u of %u: changed since or left)", bs.list_pages_after,
								 TsdgPagesFor(bs.count, layout.lists_per_page)),
						SECS(done.pages_at, done.summary_wait_at),
						(long long) meta.layer_nodes,
						bs.layer_on_worker ? "from the worker" :
						bs.layer_with_graph ? "computed with the graph, for its check" :
						psprintf("computed here in %.3f s", bs.layer_seconds),
						SECS(profile_at, wal_at),
						done.profiled ? SECS(done.summary_wait_at, profile_at) :
						SECS(wal_at, GetCurrentTimestamp()),
						!done.profiled ? "measured on the pages after the metapage" :
						psprintf("waited for after the pages; computed beside them in %.3f s%s",
								 done.profile_seconds,
								 !on_worker ? "" : done.started_after_layer ?
								 ", started once the worker's layer was in" : done.started_after_pages ?
								 ", started after them" : ", started between the list pages"))));

	result = palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) bs.count;
	return result;
}

/*
 * The init fork of an unlogged index: an empty index, just a metapage. It is
 * written and synced directly and WAL-logged as a full page, as btree does:
 * a shared buffer of an unlogged relation is not written by checkpoints, and
 * replaying a GenericXLog delta would not flush it either.
 */
void
tsdgbuildempty(Relation index)
{
	TsdgBuildState bs;
	TsdgLayout	layout;
	TsdgMetaPageData meta;
	Page		page;

	MemSet(&bs, 0, sizeof(bs));
	bs.metric = TsdgIndexMetric(index);
	TsdgParamsFromOptions(index, &bs.params);
	bs.dims = TsdgIndexTypmodDims(index);
	TsdgInitLayout(&layout, bs.dims, bs.params.degree, 0);
	TsdgFillMeta(&meta, &bs, &layout);

	page = (Page) palloc(BLCKSZ);
	TsdgInitMetaPage(page, &meta);
	PageSetChecksumInplace(page, TSDG_METAPAGE_BLKNO);
	smgrwrite(RelationGetSmgr(index), INIT_FORKNUM, TSDG_METAPAGE_BLKNO, (char *) page, true);
	log_newpage(&RelationGetSmgr(index)->smgr_rnode.node, INIT_FORKNUM, TSDG_METAPAGE_BLKNO,
				page, true);
	smgrimmedsync(RelationGetSmgr(index), INIT_FORKNUM);
	pfree(page);
}
