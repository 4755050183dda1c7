/*
 * The state of a tsdg CREATE INDEX, shared by the build (tsdgbuild.c), its
 * heap scan (tsdgbuildscan.c, with parallel workers tsdgbuildparallel.c),
 * which fills the arrays of rows, and its page writes (tsdgbuildpages.c).
 */
#ifndef TSDG_BUILD_H
#define TSDG_BUILD_H

#include "postgres.h"

#include "nodes/execnodes.h"

#include "tsdg.h"
#include "tsdgworkerclient.h"

struct dsm_segment;

#define SECS(from, to)	((double) ((to) - (from)) / 1000000.0)

typedef struct TsdgBuildState
{
	Relation	heap;
	Relation	index;
	TsdgMetric	metric;
	TsdgBuildParams params;
	int			dims;			/* 0 until the first row when the column has no typmod */

	/*
	 * rows loaded so far: tids[i] and rows[i * dims], in local memory or, for
	 * a build on the GPU worker, in the segment the worker reads
	 */
	int64		count;
	int64		capacity;
	ItemPointerData *tids;
	float	   *rows;
	bool		rows_in_files;	/* tids and rows are temporary files of spill */
	struct dsm_segment *rows_segment;	/* or a segment of the parallel scan's */
	int			parallel_workers;	/* the workers that shared the heap scan */
	int64	   *rows_placed;	/* the rows each placed in the arrays, the session's first */
	int64		rows_moved;		/* into the empty places of the participants' last chunks */
	int64		overflow_rows;	/* the rows it found past the arrays it had */
	bool		use_segment;
	TsdgBuildSegment segment;
	int			segment_growths;
	/* past maintenance_work_mem with the worker: the rows go to it in parts */
	bool		in_parts;

	/* the k-NN graph's ids (count * build_k), kept in k-NN pages for merges */
	uint32	   *knn_ids;

	/*
	 * the navigating layer's lists (tsdg_layer_node_count(count) * degree),
	 * once computed: local memory, or the worker's segment
	 */
	uint32	   *layer_ids;
	uint8	   *layer_lambdas;
	bool		layer_on_worker;
	bool		layer_with_graph;	/* written by the CPU's graph build, for its check */
	double		layer_seconds;	/* computed here */

	/* the row pages, once written (while the worker builds the graph) */
	const TsdgMetaPageData *meta;
	const TsdgLayout *layout;
	bool		rows_written;
	double		rows_seconds;	/* the row pages, written while the worker builds */

	/*
	 * the region, placed when the worker's k-NN lists or search lists come
	 * before its answer: the k-NN pages written while it diversifies, the
	 * first list pages while it checks the graph
	 */
	bool		region_placed;	/* the blocks of the list and k-NN pages appended */
	bool		knn_written;
	double		knn_seconds;
	BlockNumber list_pages_written;
	double		lists_seconds;
	BlockNumber list_pages_after;	/* written after the answer: changed or left */

	/*
	 * called between runs of the list pages written after the graph, while
	 * set: the search profile's start once the worker's entry points are in
	 * (it clears it then)
	 */
	void		(*between_list_pages) (void *arg);
	void	   *between_arg;

	/* the groups of identical rows, found once the rows are all read */
	bool		duplicates_started;
	bool		duplicates_found;
	TsdgDuplicateGroups *duplicates;
	double		duplicates_seconds; /* the threads' time */
	double		duplicates_wait_seconds;

	Size		memory_limit;	/* maintenance_work_mem in bytes */
	bool		past_memory_limit;	/* the NOTICE was raised */
	TsdgSpill  *spill;			/* large arrays in temporary files, once past the limit */

	/* what the poll callback last reported to pg_stat_progress_create_index */
	int			reported_phase;
	int64		reported_done;
} TsdgBuildState;

/*
 * Scans the heap into bs's arrays, by this session alone or with parallel
 * workers; returns the heap tuples the scan saw.
 */
extern double TsdgScanHeap(TsdgBuildState *bs, IndexInfo *indexInfo);
extern int64 TsdgFirstCapacity(const TsdgBuildState *bs);
extern int64 TsdgRowsInMemory(const TsdgBuildState *bs);
extern void TsdgGrowArrays(TsdgBuildState *bs);
extern void TsdgAddRow(TsdgBuildState *bs, ItemPointer tid, const float *row);

/*
 * tsdgbuildparallel.c: the scan shared with up to nworkers parallel workers;
 * false when it could not be (the arrays may be made already).
 */
extern bool TsdgParallelHeapScan(TsdgBuildState *bs, IndexInfo *indexInfo, int nworkers,
								 double *reltuples);

/* tsdgbuild.c */
extern void TsdgStartBuildDuplicates(TsdgBuildState *bs);
extern void TsdgFindBuildDuplicates(TsdgBuildState *bs);

/* tsdgbuildpages.c */
extern void TsdgWriteBuildRows(void *arg);
extern void TsdgWriteBuildKnn(void *arg);
extern void TsdgWriteBuildLists(void *arg, int64 rows);
extern void TsdgWriteGraphPages(TsdgBuildState *bs, TsdgMetaPageData *meta, const TsdgLayout *layout,
								const uint32 *neighbors, const uint8 *lambdas, bool with_knn);
extern void TsdgWriteBuildLayer(TsdgBuildState *bs, TsdgMetaPageData *meta, const TsdgLayout *layout);

#endif							/* TSDG_BUILD_H */
