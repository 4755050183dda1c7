/*
 * Merging the pending rows of a tsdg index into its graph: the pending rows
 * get their own k-NN graph by GNND, GGM (Wang et al., 2021, section 5) merges
 * it with the stored k-NN lists of the live nodes, the merged lists are
 * diversified again (TSDG), the navigating layer is built again from all
 * rows, and the new graph is written into a region of its own before one
 * metapage record switches to it (the format and the block
 * bookkeeping are described in tsdg.h, the steps in docs/design.md). This
 * file holds the merge's settings, its memory bound, the order of its steps
 * (tsdgmergeread.c, tsdgmergecompute.c, tsdgmergewrite.c, tsdgmergeswitch.c)
 * and what starts it; all of it runs in the session that merges.
 *
 * The computation is incremental (tsdg_merge_graph_incremental): GGM joins
 * only the lists the pending rows can change, TSDG is redone only where a
 * list can change, the other nodes keep their stored lists. Without deleted
 * nodes the ids stay as they are and the stored k-NN lists go to the core as
 * they are (it computes their distances on its threads). With deleted nodes
 * the live nodes are renumbered, the k-NN lists that held a deleted node are
 * repaired here (with that node's own neighbors) and the search lists lose
 * their edges to deleted nodes; both count as changed, so TSDG builds their
 * search lists again.
 *
 * Triggers: SELECT tsdg_merge('index'), and VACUUM/autovacuum
 * (amvacuumcleanup) when the pending rows or the deleted nodes exceed
 * tsdg.merge_threshold + tsdg.merge_scale_factor * live nodes, the way
 * autovacuum's own threshold is written.
 *
 * Concurrency. A merge holds ShareUpdateExclusiveLock on the table, as VACUUM
 * does, so two merges of an index never overlap, and no VACUUM marks nodes
 * deleted or removes pending rows while a merge reads them. Searches and
 * inserts go on: the merge "detaches" the pending list by appending an empty
 * page to it and consuming the pages before that one; inserts keep appending
 * after it, and those rows stay pending. A search reads the metapage once:
 * before the switch it sees the old graph and the whole pending list (the
 * consumed pages still lead to the rest), after it the new graph and the
 * rows that stayed pending. Deleted nodes are left out of the new graph
 * (nodes are renumbered, heap TIDs kept) after their neighbors' lists were
 * repaired with the deleted node's own neighbors.
 */
#include "postgres.h"

#include "access/relation.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdgindexarg.h"
#include "tsdgmerge.h"

int			tsdg_merge_threshold = 1000;
double		tsdg_merge_scale_factor = 0.05;
double		tsdg_merge_knn_lag = 0.5;

void
TsdgMergeInit(void)
{
	DefineCustomIntVariable("tsdg.merge_threshold",
							"Pending rows (or deleted nodes) past which VACUUM merges a tsdg index.",
							"VACUUM merges when they exceed tsdg.merge_threshold + "
							"tsdg.merge_scale_factor * live nodes; -1 disables merges by VACUUM.",
							&tsdg_merge_threshold, 1000, -1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("tsdg.merge_scale_factor",
							 "Fraction of the live nodes added to tsdg.merge_threshold.",
							 NULL,
							 &tsdg_merge_scale_factor, 0.05, 0.0, 100.0,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("tsdg.merge_knn_lag",
							 "Fraction of a tsdg index's nodes whose k-NN lists a merge on the GPU worker may leave out of the index's pages.",
							 "The worker keeps the merged k-NN lists, so such a merge writes only the search lists; "
							 "a merge that has to read the k-NN lists from the pages (after the worker restarted) "
							 "merges the nodes past them again. 0: every merge writes them.",
							 &tsdg_merge_knn_lag, 0.5, 0.0, 1.0,
							 PGC_USERSET, 0, NULL, NULL, NULL);
}

/* the nodes whose k-NN lists the k-NN pages hold */
uint32
TsdgStoredKnnNodes(const TsdgMetaPageData *meta)
{
	return meta->node_count - Min(meta->knn_unstored, meta->node_count);
}

/*
 * Bytes a merge holds per row in this backend: the row, its TID, its old and
 * new search graph list, its two changed flags, its k-NN list as read from
 * the pages, as GGM starts from it and as GGM returns it.
 */
static Size
TsdgMergeBytesPerRow(const TsdgMetaPageData *meta)
{
	return sizeof(float) * meta->dims + sizeof(ItemPointerData) +
		2 * (sizeof(uint32) + sizeof(uint8)) * meta->degree + 2 * sizeof(uint8) +
		(sizeof(uint32) + 2 * (sizeof(uint32) + sizeof(float))) * meta->build_k;
}

/* the rows a merge would hold: live nodes and pending rows */
static int64
TsdgMergeRows(const TsdgMetaPageData *meta)
{
	return Max((int64) (meta->node_count - meta->deleted_count) + meta->pending_count,
			   (int64) meta->node_count);
}

/*
 * Bytes a merge holds in this backend: its rows' arrays, the navigating
 * layer of the merged graph, built while they are held and kept until the
 * pages are written, and the check of its new rows besides the walks it
 * keeps for the repair (those get what maintenance_work_mem leaves,
 * TsdgMergedEntryPoints).
 */
double
TsdgMergeBytes(const TsdgMetaPageData *meta)
{
	TsdgBuildParams params;

	TsdgMergeParams(meta, &params);
	return (double) TsdgMergeRows(meta) * TsdgMergeBytesPerRow(meta) +
		(double) tsdg_layer_bytes(TsdgMergeRows(meta), meta->dims, &params) +
		(double) meta->pending_count * TSDG_UNREACHED_JOB_ROW_BYTES;
}

static bool
TsdgMergeFits(const TsdgMetaPageData *meta)
{
	return TsdgMergeBytes(meta) <= (double) maintenance_work_mem * 1024.0;
}

/*
 * A merge past maintenance_work_mem says so and keeps its large arrays, and
 * the core's, in temporary files (tsdgspill.c), as a build does; until the
 * merge's memory context goes. on_worker: the GPU worker will compute it.
 */
void
TsdgPlanMergeMemory(TsdgMerge *m, bool on_worker)
{
	if (TsdgMergeFits(&m->meta))
		return;
	ereport(NOTICE,
			(errmsg("merging tsdg index \"%s\" does not fit into maintenance_work_mem",
					RelationGetRelationName(m->index)),
			 on_worker ?
			 errdetail("The merge goes on with its large arrays in temporary files, which may take more time. "
					   "Its data goes to the GPU worker and back in parts through shared memory within maintenance_work_mem; "
					   "the worker's own copy of the graph is its working memory, which maintenance_work_mem does not bound.") :
			 errdetail("The merge goes on with its large arrays in temporary files, which may take more time."),
			 errhint("Increase maintenance_work_mem to about %.0f MB to speed up merges.",
					 TsdgMergeBytes(&m->meta) / (1024.0 * 1024.0) + 1)));
	m->spill = TsdgSpillStart();
}

/* a large array of a merge: local memory, or a temporary file once it spills */
void *
TsdgMergeAlloc(TsdgMerge *m, Size bytes, bool zeroed)
{
	/* a new temporary file reads as zeros */
	if (m->spill != NULL)
		return TsdgSpillAlloc(m->spill, Max(bytes, 1));
	return MemoryContextAllocExtended(CurrentMemoryContext, Max(bytes, 1),
									  MCXT_ALLOC_HUGE | (zeroed ? MCXT_ALLOC_ZERO : 0));
}

/* the core's parameters of a merge: the index's build parameters */
void
TsdgMergeParams(const TsdgMetaPageData *meta, TsdgBuildParams *params)
{
	tsdg_build_params_default(params);
	params->degree = meta->degree;
	params->build_k = meta->build_k;
	params->samples = meta->samples;
	params->iterations = meta->iterations;
	params->alpha = meta->alpha;
	/* an index built when lambda0 had a wider range */
	params->lambda0 = Min(meta->lambda0, TSDG_MAX_LAMBDA0);
}

/*
 * DEBUG1: where a merge's time went (reading the pages; GNND, GGM and TSDG;
 * entry points and d_nn1+, or the wait for the worker's; writing and
 * switching), how many old lists changed and how many of the list pages of
 * old nodes hold a changed record.
 */
static void
TsdgReportMerge(const TsdgMerge *m, const instr_time *phase_start, instr_time entry_time)
{
	double		seconds[4];
	char		notes[448];
	int64		knn_changed = 0;
	int64		graph_changed = 0;
	int64		pages_changed = 0;
	int			per_page = m->layout.lists_per_page;

	if (!message_level_is_interesting(DEBUG1))
		return;
	for (int i = 0; i < 3; i++)
	{
		instr_time	t = phase_start[i + 1];

		INSTR_TIME_SUBTRACT(t, phase_start[i]);
		seconds[i] = INSTR_TIME_GET_DOUBLE(t);
	}
	/* the third phase holds the entry points and the writing */
	seconds[3] = seconds[2] - INSTR_TIME_GET_DOUBLE(entry_time);
	seconds[2] = INSTR_TIME_GET_DOUBLE(entry_time);
	for (int64 first = 0; first < m->n_old; first += per_page)
	{
		bool		page_changed = false;

		for (int64 id = first; id < Min(first + per_page, m->n_old); id++)
		{
			knn_changed += (m->changed[id] & TSDG_CHANGED_KNN) != 0;
			graph_changed += (m->changed[id] & TSDG_CHANGED_GRAPH) != 0;
			page_changed |= (m->changed[id] & TSDG_CHANGED_GRAPH) != 0;
		}
		pages_changed += page_changed;
	}
	if (m->knn_pages_kept)
		snprintf(notes, sizeof(notes),
				 "; k-NN pages kept as they were (the lists of %u of %u nodes)",
				 TsdgStoredKnnNodes(&m->meta), m->new_meta.node_count);
	else
		snprintf(notes, sizeof(notes), "%s",
				 m->knn_pages_written ? "; k-NN pages written while the worker diversified" : "");
	if (m->list_pages_early > 0)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; %u of %u list pages written in %.2f s from the worker's first published lists (%u before its answer), by %d parallel workers and the session, %u of them again after its component linking",
				 m->list_pages_early, TsdgNewListPages(m), m->list_pages_early_seconds,
				 m->list_pages_at_answer, m->list_writers_launched, m->list_pages_relinked);
	if (m->lists_repaired > 0)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; " INT64_FORMAT " lists given an edge into a new row their searches did not reach, %u list pages written again",
				 m->lists_repaired, m->list_pages_repaired);
	if (m->split < m->n_old)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; " INT64_FORMAT " nodes past the stored k-NN lists merged again",
				 m->n_old - m->split);
	ereport(DEBUG1,
			(errmsg("tsdg merge of \"%s\": " INT64_FORMAT " old and " INT64_FORMAT " new rows, "
					INT64_FORMAT " deleted nodes dropped; "
					"read %.2f s, graph %.2f s, entry points %.2f s%s, write and switch %.2f s",
					RelationGetRelationName(m->index), m->n_old, m->n_new,
					(int64) m->meta.node_count - m->n_old,
					seconds[0], seconds[1], seconds[2],
					m->worker_summary_failed ? " (the worker's summary failed: computed here)" :
					m->segment.summary_pid != 0 ? " (waiting for the worker's)" : "", seconds[3]),
			 errdetail("Old lists changed: " INT64_FORMAT " k-NN, " INT64_FORMAT " search; "
					   "list pages of old nodes with a changed search list: " INT64_FORMAT " of " INT64_FORMAT "; "
					   "row extents: %d%s%s.",
					   knn_changed, graph_changed, pages_changed,
					   (int64) TsdgPagesFor(m->n_old, per_page), m->new_meta.row_extent_count,
					   m->new_meta.retired_extent_count > 0 ? ", every row written again" : "",
					   notes)));
}

/*
 * Merges the pending rows and drops the deleted nodes of index. The caller
 * holds ShareUpdateExclusiveLock on its table. Returns the pending rows
 * merged, or -1 when a scan from before the previous merge still runs: a
 * merge never waits for scans, since it would hold the table's lock (and so
 * keep VACUUM out) for as long as any cursor stays open.
 */
static int64
TsdgMergeIndex(Relation index)
{
	TsdgMerge	m;
	TsdgMetric	metric = TsdgIndexMetric(index);
	TsdgMetaPageData before;
	MemoryContext merge_ctx;
	MemoryContext old_ctx;
	volatile int64 merged;
	instr_time	phase_start[4];
	instr_time	entry_time;

	TsdgReadMeta(index, &before);
	if (before.pending_count == 0 && before.deleted_count == 0)
		return 0;
	if (!TsdgReclaimRetired(index))
		return -1;

	merge_ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg merge", ALLOCSET_DEFAULT_SIZES);
	old_ctx = MemoryContextSwitchTo(merge_ctx);

	MemSet(&m, 0, sizeof(m));
	m.index = index;
	TsdgDetachPending(&m);
	TsdgLayoutFromMeta(&m.layout, &m.meta);
	m.dims = m.meta.dims;
	m.k = m.meta.build_k;

	/* the worker's segment, when there is one, is mapped until the merge ends */
	PG_TRY();
	{
		instr_time	entry_start;
		instr_time	waited_check;

		INSTR_TIME_SET_CURRENT(phase_start[0]);
		TsdgLoadRows(&m, metric);
		TsdgStampMergedGraph(&m);
		INSTR_TIME_SET_CURRENT(phase_start[1]);
		TsdgComputeMerged(&m, metric);
		INSTR_TIME_SET_CURRENT(phase_start[2]);
		INSTR_TIME_SET_ZERO(entry_time);
		/* a worker that merged computes them while the pages are written */
		/* the layer first: the check of unreached rows walks from it */
		if (m.segment.summary_pid == 0)
		{
			TsdgComputeMergedLayer(&m, metric);
			TsdgMergedEntryPoints(&m, metric);
		}
		INSTR_TIME_SET_CURRENT(entry_start);
		INSTR_TIME_ACCUM_DIFF(entry_time, entry_start, phase_start[2]);
		TsdgWriteRegion(&m);
		if (!m.rows_written)
			TsdgWriteRows(&m);
		TsdgPrepareFreedPages(&m, m.meta.spare_start != TSDG_NO_BLOCK && m.meta.spare_blocks > 0 &&
							  m.new_meta.list_start != m.meta.spare_start);
		if (m.segment.summary_pid != 0)
		{
			instr_time	waited;

			INSTR_TIME_SET_CURRENT(entry_start);
			m.worker_summary_failed = !TsdgWorkerMergeSummary(&m.segment, &m.new_meta);
			m.layer_on_worker = !m.worker_summary_failed &&
				TsdgWorkerMergeLayer(&m.segment, m.n_old + m.n_new, &m.layer_ids, &m.layer_lambdas);
			if (!m.layer_on_worker)
				TsdgReadLeftRows(&m);
			if (!m.layer_on_worker)
				TsdgComputeMergedLayer(&m, metric);
			if (m.worker_summary_failed)
				TsdgMergedEntryPoints(&m, metric);
			INSTR_TIME_SET_CURRENT(waited);
			INSTR_TIME_ACCUM_DIFF(entry_time, waited, entry_start);
		}
		TsdgWriteLayerPages(&m);
		INSTR_TIME_SET_CURRENT(entry_start);
		TsdgFinishUnreachedCheck(&m);
		TsdgWriteRepairedListPages(&m);
		INSTR_TIME_SET_CURRENT(waited_check);
		INSTR_TIME_ACCUM_DIFF(entry_time, waited_check, entry_start);
		TsdgSwitchGraph(&m);
		INSTR_TIME_SET_CURRENT(phase_start[3]);
		TsdgReportMerge(&m, phase_start, entry_time);
		merged = m.n_new;
	}
	PG_FINALLY();
	{
		int64		dropped;
		TsdgError	error;

		/* its threads read the merged graph, which goes with the segment and the context */
		if (m.unreached_job != NULL)
			(void) tsdg_unreached_job_finish(m.unreached_job, NULL, 0, &dropped, &error);
		TsdgMergeSegmentRelease(&m.segment);
	}
	PG_END_TRY();

	MemoryContextSwitchTo(old_ctx);
	MemoryContextDelete(merge_ctx);
	return merged;
}

static bool
TsdgMergeDue(const TsdgMetaPageData *meta)
{
	double		live = (double) (meta->node_count - meta->deleted_count);
	double		threshold = tsdg_merge_threshold + tsdg_merge_scale_factor * live;

	if (tsdg_merge_threshold < 0)
		return false;
	return (double) meta->pending_count > threshold || (double) meta->deleted_count > threshold;
}

/*
 * amvacuumcleanup's merge, when the pending rows or the deleted nodes are
 * past the threshold. VACUUM already holds the table's
 * ShareUpdateExclusiveLock; it does not wait for old scans, it leaves the
 * merge to a later VACUUM.
 */
void
TsdgVacuumMerge(IndexVacuumInfo *info)
{
	TsdgMetaPageData meta;

	if (info->analyze_only)
		return;
	TsdgReadMeta(info->index, &meta);
	if (!TsdgMergeDue(&meta))
		return;
	if (TsdgMergeIndex(info->index) < 0)
		ereport(DEBUG1,
				(errmsg("tsdg index \"%s\" not merged: a scan from before its last merge still runs",
						RelationGetRelationName(info->index))));
}

/*
 * Ownership, as PostgreSQL's own commands check it: a caller who may not
 * merge must not queue for the lock (and cancel autovacuum).
 */
static void
TsdgCheckMergeRight(Oid index_oid, Oid heap_oid, void *arg)
{
	if (!pg_class_ownercheck(heap_oid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(heap_oid));
}

PG_FUNCTION_INFO_V1(tsdg_merge);
Datum
tsdg_merge(PG_FUNCTION_ARGS)
{
	/* the table first, as VACUUM locks it; this lock keeps VACUUM and other merges out */
	const TsdgIndexArg arg = {
		.check = TsdgCheckMergeRight,
		.heap_lock = ShareUpdateExclusiveLock,
		.index_lock = RowExclusiveLock,
		.partition_hint = "Merge the index of each partition.",
	};
	Oid			heapid;
	Relation	index;
	int64		merged;

	index = TsdgOpenIndexArg(PG_GETARG_OID(0), &arg, &heapid);
	merged = TsdgMergeIndex(index);
	if (merged < 0)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("tsdg index \"%s\" cannot be merged while a scan from before its last merge is open",
						RelationGetRelationName(index)),
				 errhint("Close the cursors that read the table, this session's too, and run tsdg_merge() again; VACUUM merges later by itself.")));
	/* the planner's count of a search's work, of the merged graph */
	if (merged > 0)
		TsdgMeasureSearchProfile(index);

	index_close(index, RowExclusiveLock);
	UnlockRelationOid(heapid, ShareUpdateExclusiveLock);
	PG_RETURN_INT64(merged);
}
