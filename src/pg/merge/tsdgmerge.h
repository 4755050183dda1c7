/*
 * What the files of a merge share (tsdgmerge.c and the files of its steps:
 * tsdgmergeread.c, tsdgmergecompute.c, tsdgmergewrite.c, tsdgmergeswitch.c),
 * all in the session that merges: the state of one merge and the steps the
 * others call.
 */
#ifndef TSDG_MERGE_H
#define TSDG_MERGE_H

#include "tsdg.h"
#include "tsdgworkerclient.h"

/* One merge: what it consumed, the rows it merges, and the graph it made. */
typedef struct TsdgMerge
{
	Relation	index;
	TsdgMetaPageData meta;		/* as it was when the pending list was detached */
	TsdgLayout	layout;			/* of the old graph */

	/* the pending pages consumed: consumed_head .. consumed_tail */
	BlockNumber consumed_head;
	BlockNumber consumed_tail;
	BlockNumber remaining_head; /* the page appended at the detach */
	int64		consumed_rows;

	/* rows [0, n_old) are the live nodes, [n_old, n_old + n_new) the pending rows */
	int64		n_old;
	int64		n_new;
	/*
	 * the computation's old rows: the live nodes whose k-NN lists it has,
	 * all but those past the k-NN pages when it read them (tsdg.h); the
	 * rows after them are its batch
	 */
	int64		split;
	int			dims;
	int			k;
	float	   *rows;
	ItemPointerData *tids;
	uint32	   *old_knn_ids;	/* n_old * k, ids of the new numbering */
	float	   *old_knn_dists;	/* NULL without deletes: the core computes them */

	/* the stored search graph, new numbering */
	uint32	   *old_neighbors;	/* n_old * degree */
	uint8	   *old_lambdas;
	uint8	   *old_changed;	/* n_old: list repaired after deletes; NULL without deletes */
	uint8	   *changed;		/* per row: TSDG_CHANGED_KNN | GRAPH | LINK */

	/* the merged graph */
	uint32	   *knn_ids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	/* its navigating layer's lists, once computed (here, or in the worker's segment) */
	uint32	   *layer_ids;
	uint8	   *layer_lambdas;
	bool		layer_on_worker;
	bool		layer_with_graph;	/* written by the merge here, for its check */
	TsdgMetaPageData new_meta;
	TsdgLayout	new_layout;		/* of the merged graph, its rows placed */
	TsdgGraphArrays arrays;		/* what its pages are written from */
	bool		region_placed;	/* new_meta's region fields are set */
	bool		rows_written;	/* while the worker merged */
	bool		knn_pages_written;	/* while the worker diversified */
	/* writing the list pages as the worker publishes their lists, once it does */
	TsdgListWriters *list_writers;
	BlockNumber list_pages_early;	/* written by the list writers (tsdglistwriters.c) */
	BlockNumber list_pages_at_answer;	/* of those, written before its answer */
	BlockNumber list_pages_relinked;	/* of those, written again after its linking */
	double		list_pages_early_seconds;
	int			list_writers_launched;	/* parallel workers that wrote list pages */
	bool		knn_pages_kept; /* the worker keeps the merged k-NN lists, the pages
								 * keep the stored ones */

	/*
	 * unread row blocks (retired extents, a retired k-NN region, the spare
	 * rows): where new extents may go, then what stays spare or is freed
	 */
	TsdgRowExtent unused_rows[TSDG_MAX_ROW_EXTENTS + 2];
	int			unused_row_count;

	/* pages given to the free list at the switch, linked first .. last */
	BlockNumber freed_first;
	BlockNumber freed_last;
	/* block runs added to the metapage's free extents at the switch, unwritten */
	TsdgRowExtent freed_extents[TSDG_MAX_FREE_EXTENTS];
	int			freed_extent_count;

	/* where the arrays above live when the worker will compute the graph */
	TsdgMergeSegment segment;
	/* else in temporary files, once the merge is past maintenance_work_mem */
	TsdgSpill  *spill;
	/* what of the old graph is not read here: the worker copies it in from its copy */
	TsdgWorkerCopy left_to_worker;
	/* the search for the new rows the searches do not reach, while the pages are written */
	TsdgUnreachedJob *unreached_job;
	int64		lists_repaired; /* lists given an edge into such a row */
	BlockNumber list_pages_repaired;	/* list pages written again for them */
	bool		worker_summary_failed;	/* the summary computed here instead */
} TsdgMerge;

/* tsdgmerge.c: the index's parameters and bounds */
extern uint32 TsdgStoredKnnNodes(const TsdgMetaPageData *meta);
extern double TsdgMergeBytes(const TsdgMetaPageData *meta);
extern void TsdgPlanMergeMemory(TsdgMerge *m, bool on_worker);
extern void *TsdgMergeAlloc(TsdgMerge *m, Size bytes, bool zeroed);
extern void TsdgMergeParams(const TsdgMetaPageData *meta, TsdgBuildParams *params);

/* tsdgmergeread.c */
extern void TsdgDetachPending(TsdgMerge *m);
extern void TsdgLoadRows(TsdgMerge *m, TsdgMetric metric);
extern void TsdgReadLeftGraph(TsdgMerge *m);
extern void TsdgReadLeftRows(TsdgMerge *m);

/* tsdgmergecompute.c */
extern void TsdgStampMergedGraph(TsdgMerge *m);
extern bool TsdgKnnPagesMayLagFor(const TsdgMetaPageData *meta, int64 n);
extern void TsdgComputeMerged(TsdgMerge *m, TsdgMetric metric);
extern void TsdgMergedEntryPoints(TsdgMerge *m, TsdgMetric metric);
extern void TsdgComputeMergedLayer(TsdgMerge *m, TsdgMetric metric);
extern void TsdgFinishUnreachedCheck(TsdgMerge *m);

/* tsdgmergewrite.c */
extern BlockNumber TsdgNewListPages(const TsdgMerge *m);
extern void TsdgWriteKnnPages(void *arg);
extern void TsdgWriteListPagesEarly(void *arg, int64 rows);
extern void TsdgFinishListPages(TsdgMerge *m, bool merged);
extern void TsdgWriteRepairedListPages(TsdgMerge *m);
extern void TsdgWriteRegion(TsdgMerge *m);
extern void TsdgWriteLayerPages(TsdgMerge *m);
extern void TsdgWriteRows(TsdgMerge *m);
extern void TsdgWriteNewRows(void *arg);

/* tsdgmergeswitch.c */
extern bool TsdgReclaimRetired(Relation index);
extern void TsdgPrepareFreedPages(TsdgMerge *m, bool free_spare);
extern void TsdgSwitchGraph(TsdgMerge *m);

#endif							/* TSDG_MERGE_H */
