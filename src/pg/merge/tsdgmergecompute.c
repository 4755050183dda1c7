/*
 * A merge's computation: the merged k-NN lists and search graph, by the GPU
 * worker when it takes the merge, else by the core on this session's CPU
 * threads; then the merged graph's entry points, d_nn1+, navigating layer
 * and the new rows its searches do not reach. Runs in the session that
 * merges; the worker's part is requested through tsdgoffload.c.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "tsdgmerge.h"

static bool
TsdgMergePoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

static void
TsdgCheckCore(Relation index, TsdgStatus status, const TsdgError *error)
{
	if (status == TSDG_OK)
		return;
	if (status == TSDG_ERR_CANCELLED)
		CHECK_FOR_INTERRUPTS();
	ereport(ERROR,
			(errcode(status == TSDG_ERR_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY :
					 status == TSDG_ERR_CANCELLED ? ERRCODE_QUERY_CANCELED :
					 ERRCODE_INTERNAL_ERROR),
			 errmsg("merging tsdg index \"%s\" failed: %s",
					RelationGetRelationName(index), error->message)));
}

/*
 * What the metapage will say of the merged graph, set before it is computed:
 * the worker keeps its copy under that key (TsdgIndexKey), and the switch
 * writes the same values. The timestamp tells this merge's graph from one a
 * failed merge of the same graph_version left on the worker. The rows
 * checked for searches that do not reach them are the computation's batch
 * (the new rows, and the old ones past the stored k-NN lists, whose search
 * lists are built again), with the old rows that lost an edge into them.
 */
void
TsdgStampMergedGraph(TsdgMerge *m)
{
	m->new_meta.graph_version = m->meta.graph_version + 1;
	m->new_meta.node_count = (uint32) (m->n_old + m->n_new);
	m->new_meta.deleted_count = 0;
	m->new_meta.last_merge = GetCurrentTimestamp();
	m->new_meta.unreached_checked = (uint32) (m->n_old + m->n_new - m->split);
}

/* the arrays of the merge's computation as they stand now */
static void
TsdgMergeDataOf(const TsdgMerge *m, TsdgMetric metric, const TsdgBuildParams *params,
				TsdgMergeData *data)
{
	int64		n = m->n_old + m->n_new;

	data->tids = m->tids;
	data->rows = m->rows;
	data->n_old = m->split;
	data->n_new = n - m->split;
	data->dims = m->dims;
	data->metric = metric;
	data->params = params;
	data->old_knn_ids = m->old_knn_ids;
	data->old_knn_dists = m->old_knn_dists;
	data->old_neighbors = m->old_neighbors;
	data->old_lambdas = m->old_lambdas;
	data->old_changed = m->old_changed;
	/* a merge in parts that keeps the k-NN pages takes no k-NN lists back: the worker keeps them */
	data->knn_ids = m->segment.in_parts && m->knn_pages_kept ? NULL : m->knn_ids;
	data->neighbors = m->neighbors;
	data->lambdas = m->lambdas;
	data->changed = m->changed;
}

/* the merged graph's layer lists, for the merge or tsdg_build_layer to write */
static void
TsdgMakeRoomForMergedLayer(TsdgMerge *m, const TsdgBuildParams *params)
{
	int64		layer_nodes = tsdg_layer_node_count(m->n_old + m->n_new);

	if (layer_nodes == 0)
		return;
	m->layer_ids = palloc(sizeof(uint32) * params->degree * layer_nodes);
	m->layer_lambdas = palloc(sizeof(uint8) * params->degree * layer_nodes);
}

/*
 * The seam of the merge computation: (old rows, their k-NN lists, their
 * search lists, new rows) in, (merged k-NN lists, new search graph, which
 * lists changed) out; see tsdg_merge_graph_incremental. m->rows holds
 * n_old + n_new rows, old first (the old ones, and with TSDG_COPY_GRAPH the
 * old lists, not read yet when m->left_to_worker); old_knn_dists may be
 * NULL. The GPU worker computes it when it can take it (on the GPU: the same
 * incremental merge with GNND, the old lists' distances and GGM on the
 * device), as it builds for CREATE INDEX, and keeps the merged graph for the
 * searches after the switch and for the next merge; else, or when the worker
 * fails or dies meanwhile, this backend computes it on the CPU, after reading
 * what it left to the worker. Either way the pages are written by this
 * backend afterwards, so a merge is as crash-safe on the worker as on the
 * CPU.
 */
static void
TsdgMergeComputeGraph(TsdgMerge *m, TsdgMetric metric, const TsdgBuildParams *params)
{
	TsdgWorkerMerge outcome;
	TsdgError	error;
	TsdgStatus	status;
	int64		n = m->n_old + m->n_new;
	TsdgMergeData data;

	TsdgMergeDataOf(m, metric, params, &data);
	outcome = TsdgWorkerMergeGraph(m->index, &m->segment, &m->meta, m->left_to_worker,
								   &m->new_meta, &data);
	TsdgFinishListPages(m, outcome == TSDG_WORKER_MERGED);
	if (outcome != TSDG_WORKER_MERGED && m->left_to_worker != TSDG_COPY_NONE)
	{
		/* the worker dropped its copy, or gave up: what was left to it is read after all */
		TsdgReadLeftGraph(m);
		/* the split may have moved: the batch checked with it */
		m->new_meta.unreached_checked = (uint32) (n - m->split);
		if (outcome == TSDG_WORKER_NEEDS_OLD_GRAPH)
		{
			/* what was read moved the split, and may have read the lists into arrays of their own */
			TsdgMergeDataOf(m, metric, params, &data);
			outcome = TsdgWorkerMergeGraph(m->index, &m->segment, &m->meta, TSDG_COPY_NONE,
										   &m->new_meta, &data);
		}
		TsdgFinishListPages(m, outcome == TSDG_WORKER_MERGED);
	}
	if (outcome == TSDG_WORKER_MERGED)
		return;
	/* the worker's lists, if written, are not those of this merge */
	m->knn_pages_written = false;
	m->list_pages_early = 0;
	if (m->knn_pages_kept && m->region_placed)
	{
		/*
		 * Placed for the list pages only: placed again, for the k-NN pages
		 * too. Blocks appended for it stay unused until REINDEX, as after a
		 * cancelled merge.
		 */
		m->region_placed = false;
	}
	m->knn_pages_kept = false;
	TsdgMakeRoomForMergedLayer(m, params);
	status = tsdg_merge_graph_incremental(NULL, m->rows, NULL, NULL, m->split, n - m->split, m->dims, metric,
										  params, m->old_knn_ids, m->old_knn_dists,
										  m->old_neighbors, m->old_lambdas, m->old_changed,
										  m->knn_ids, NULL, m->neighbors, m->lambdas, m->changed,
										  m->layer_ids, m->layer_lambdas, TsdgMergePoll, NULL, &error);
	TsdgCheckCore(m->index, status, &error);
	m->layer_with_graph = m->layer_ids != NULL;
}

/*
 * Whether a merge on the worker may leave the k-NN pages as they are: it
 * renumbers nothing (no deleted nodes), the pages hold some lists (their
 * width was checked when they were read), and the nodes past them stay
 * within tsdg.merge_knn_lag of a merged graph of n nodes (true for n, true
 * for fewer).
 */
bool
TsdgKnnPagesMayLagFor(const TsdgMetaPageData *meta, int64 n)
{
	uint32		stored = TsdgStoredKnnNodes(meta);

	return meta->deleted_count == 0 && stored > 0 &&
		(double) (n - stored) <= tsdg_merge_knn_lag * (double) n;
}

/* the merged k-NN lists and search graph */
void
TsdgComputeMerged(TsdgMerge *m, TsdgMetric metric)
{
	int64		n = m->n_old + m->n_new;
	TsdgBuildParams params;

	TsdgMergeParams(&m->meta, &params);
	if (m->segment.seg != NULL)
	{
		/*
		 * The segment has no k-NN lists when they could lag with all the
		 * pending rows the merge might take; it took no more. The local
		 * array is for a merge on the CPU should the worker fail.
		 */
		m->knn_ids = m->segment.knn_ids != NULL ? m->segment.knn_ids :
			TsdgMergeAlloc(m, sizeof(uint32) * Max(n, 1) * m->k, false);
		m->changed = m->segment.changed;
		m->neighbors = m->segment.neighbors;
		m->lambdas = m->segment.lambdas;
		m->knn_pages_kept = TsdgKnnPagesMayLagFor(&m->meta, n);
		Assert(m->knn_pages_kept || m->segment.knn_ids != NULL);
		m->segment.while_merging = TsdgWriteNewRows;
		m->segment.knn_ready = m->knn_pages_kept ? NULL : TsdgWriteKnnPages;
		m->segment.lists_ready = TsdgWriteListPagesEarly;
		m->segment.hook_arg = m;
	}
	else
	{
		/* the local array is for a merge on the CPU should the worker fail */
		m->knn_ids = TsdgMergeAlloc(m, sizeof(uint32) * Max(n, 1) * m->k, false);
		m->knn_pages_kept = m->segment.in_parts && TsdgKnnPagesMayLagFor(&m->meta, n);
		m->changed = TsdgMergeAlloc(m, sizeof(uint8) * Max(n, 1), false);
		m->neighbors = TsdgMergeAlloc(m, sizeof(uint32) * Max(n, 1) * params.degree, false);
		m->lambdas = TsdgMergeAlloc(m, sizeof(uint8) * Max(n, 1) * params.degree, false);
	}
	TsdgInitLayout(&m->new_layout, m->dims, m->meta.degree, n);
	m->arrays = (TsdgGraphArrays) {&m->new_layout, n, m->tids, m->rows, m->neighbors, m->lambdas,
	m->knn_ids, m->k};
	if (n > 0)
		TsdgMergeComputeGraph(m, metric, &params);
}

/*
 * Entry points and d_nn1+ of the merged graph into m->new_meta, and the
 * search for the new rows the searches do not reach started beside the page
 * writes (TsdgFinishUnreachedCheck).
 */
void
TsdgMergedEntryPoints(TsdgMerge *m, TsdgMetric metric)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			degree = m->meta.degree;
	TsdgError	error;
	TsdgStatus	status;
	uint32		entries[TSDG_MAX_ENTRY_POINTS];
	uint32	   *navigating;
	int			navigating_count;
	double		record_bytes;

	nm->entry_count = 0;
	nm->nn1_bound = 0;
	if (n == 0)
		return;
	status = tsdg_select_entry_points(m->rows, n, m->dims, metric, m->neighbors, degree,
									  TSDG_MAX_ENTRY_POINTS, entries, &error);
	TsdgCheckCore(m->index, status, &error);
	for (int i = 0; i < TSDG_MAX_ENTRY_POINTS; i++)
		if (entries[i] != TSDG_INVALID_ID)
			nm->entry_points[nm->entry_count++] = entries[i];
	status = tsdg_graph_nn1_bound(m->rows, n, m->dims, metric, m->neighbors, degree,
								  &nm->nn1_bound, &error);
	TsdgCheckCore(m->index, status, &error);

	/*
	 * the walk of this backend's scans and of the CPU worker's, at
	 * tsdg.ef_search; the walks it keeps for the repair get what
	 * maintenance_work_mem leaves
	 */
	record_bytes = Max(0.0, (double) maintenance_work_mem * 1024.0 - TsdgMergeBytes(&m->meta));
	navigating = palloc(sizeof(uint32) * (nm->entry_count + tsdg_strided_entry_count(n)));
	navigating_count = tsdg_navigating_set(nm->entry_points, nm->entry_count, n, navigating);
	m->unreached_job = tsdg_unreached_job_start(m->rows, n, m->dims, metric, m->neighbors,
												m->lambdas, degree, navigating,
												navigating_count, m->layer_ids, m->layer_lambdas,
												m->split, m->changed,
												tsdg_ef_search, tsdg_lambda_search,
												(int64) record_bytes, &error);
	pfree(navigating);
	if (m->unreached_job == NULL)
		TsdgCheckCore(m->index, TSDG_ERR_OUT_OF_MEMORY, &error);
}

/*
 * The merged graph's navigating layer, built again from all its rows (the
 * node count changed, and a merge that renumbers moves rows), here on the
 * CPU: where the worker merged, it computes the layer beside its summary,
 * and a merge here wrote the one its check walked from.
 */
void
TsdgComputeMergedLayer(TsdgMerge *m, TsdgMetric metric)
{
	int64		n = m->n_old + m->n_new;
	TsdgBuildParams params;
	TsdgError	error;
	TsdgStatus	status;

	m->layer_on_worker = false;
	if (m->layer_with_graph || tsdg_layer_node_count(n) == 0)
		return;
	TsdgMergeParams(&m->meta, &params);
	TsdgMakeRoomForMergedLayer(m, &params);
	status = tsdg_build_layer(NULL, m->rows, n, m->dims, metric, &params, m->layer_ids,
							  m->layer_lambdas, TsdgMergePoll, NULL, &error);
	TsdgCheckCore(m->index, status, &error);
}

/*
 * After the repair changed lists: the entry points picked on the repaired
 * graph into m->new_meta, as a search index made from the pages picks them
 * (their descents follow the lists), with its d_nn1+. When they differ from
 * those the check walked from, the rows a search from them does not reach
 * join the unreached ones listed (unreached of them, the first ones in
 * m->new_meta). Returns how many are listed then, at least.
 */
static int64
TsdgRecheckFromRepairedEntries(TsdgMerge *m, int64 unreached)
{
	TsdgMetaPageData *nm = &m->new_meta;
	TsdgMetric	metric = TsdgIndexMetric(m->index);
	int64		n = m->n_old + m->n_new;
	int			degree = m->meta.degree;
	uint32		entries[TSDG_MAX_ENTRY_POINTS];
	int			count = 0;
	uint32	   *navigating;
	int			navigating_count;
	uint32	   *rows;
	int64		more;
	int			listed = (int) Min(unreached, TSDG_MAX_UNREACHED);
	TsdgUnreachedJob *job;
	TsdgError	error;
	TsdgStatus	status;

	status = tsdg_select_entry_points(m->rows, n, m->dims, metric, m->neighbors, degree,
									  TSDG_MAX_ENTRY_POINTS, entries, &error);
	TsdgCheckCore(m->index, status, &error);
	for (int i = 0; i < TSDG_MAX_ENTRY_POINTS; i++)
		if (entries[i] != TSDG_INVALID_ID)
			entries[count++] = entries[i];
	if (count == nm->entry_count && memcmp(entries, nm->entry_points, sizeof(uint32) * count) == 0)
		return unreached;
	memcpy(nm->entry_points, entries, sizeof(uint32) * count);
	nm->entry_count = count;
	status = tsdg_graph_nn1_bound(m->rows, n, m->dims, metric, m->neighbors, degree, &nm->nn1_bound, &error);
	TsdgCheckCore(m->index, status, &error);
	/* searches from the layer do not start from the entry points */
	if (m->layer_ids != NULL)
		return unreached;

	navigating = palloc(sizeof(uint32) * (count + tsdg_strided_entry_count(n)));
	navigating_count = tsdg_navigating_set(nm->entry_points, count, n, navigating);
	job = tsdg_unreached_job_start(m->rows, n, m->dims, metric, m->neighbors, m->lambdas, degree,
								   navigating, navigating_count, NULL, NULL, m->split, m->changed,
								   tsdg_ef_search, tsdg_lambda_search, 0, &error);
	pfree(navigating);
	if (job == NULL)
		TsdgCheckCore(m->index, TSDG_ERR_OUT_OF_MEMORY, &error);
	rows = palloc(sizeof(uint32) * 2 * TSDG_MAX_UNREACHED);
	status = tsdg_unreached_job_finish(job, rows, TSDG_MAX_UNREACHED, &more, &error);
	TsdgCheckCore(m->index, status, &error);
	memcpy(rows + Min(more, TSDG_MAX_UNREACHED), nm->unreached, sizeof(uint32) * listed);
	count = (int) Min(more, TSDG_MAX_UNREACHED) + listed;
	qsort(rows, count, sizeof(uint32), TsdgCompareNodeIds);
	listed = 0;
	for (int i = 0; i < count && listed < TSDG_MAX_UNREACHED; i++)
		if (listed == 0 || nm->unreached[listed - 1] != rows[i])
			nm->unreached[listed++] = rows[i];
	pfree(rows);
	return Max(listed, Max(unreached, more));
}

/*
 * The new rows the merged graph's searches do not reach, into m->new_meta,
 * once the search TsdgMergedEntryPoints started has them (none when the
 * worker's summary brought them). A merge computed here first repairs its
 * graph for them (tsdg_unreached_job_finish_repairing), as the worker does
 * its own: most then are reached, and fewer rows cost every search an
 * exact distance. A graph the worker computed stays as the worker holds it
 * when its summary failed: the check here then only lists the rows.
 */
void
TsdgFinishUnreachedCheck(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	TsdgUnreachedJob *job = m->unreached_job;
	int64		unreached;
	TsdgError	error;
	TsdgStatus	status;

	if (job == NULL)
		return;
	m->unreached_job = NULL;
	if (m->segment.seg == NULL && m->segment.parts_seg == NULL)
	{
		/* the lists it marks are counted with the worker's where their pages are written again */
		int64		lists_marked;

		status = tsdg_unreached_job_finish_repairing(job, m->neighbors, m->lambdas, m->meta.degree,
													 m->changed, nm->unreached, TSDG_MAX_UNREACHED,
													 &unreached, &lists_marked, &error);
		TsdgCheckCore(m->index, status, &error);
		if (lists_marked > 0)
			unreached = TsdgRecheckFromRepairedEntries(m, unreached);
	}
	else
	{
		status = tsdg_unreached_job_finish(job, nm->unreached, TSDG_MAX_UNREACHED, &unreached, &error);
		TsdgCheckCore(m->index, status, &error);
	}
	nm->unreached_count = (int32) Min(unreached, TSDG_MAX_UNREACHED);
	if (unreached > TSDG_MAX_UNREACHED)
		ereport(LOG,
				(errmsg("tsdg index \"%s\": %lld of the %lld rows merged are not reached by a search for their own vector at tsdg.ef_search %d; the first %d are searched exactly",
						RelationGetRelationName(m->index), (long long) unreached,
						(long long) m->n_new, tsdg_ef_search, TSDG_MAX_UNREACHED)));
}
