/*
 * The calls a session makes to the GPU worker (worker/client, run in the
 * sessions): searches, batches of searches, builds and merges handed to the
 * worker, each of which returns false where the session should work on the
 * CPU instead. The worker's processes are declared in tsdgworkerserver.h,
 * the shared memory both sides use in tsdgipc.h.
 */
#ifndef TSDG_WORKER_CLIENT_H
#define TSDG_WORKER_CLIENT_H

#include "postgres.h"

#include "storage/itemptr.h"
#include "utils/relcache.h"

#include "tsdg.h"
#include "tsdg_capi.h"

/* settings of the sessions' requests (defined with the worker's others in tsdgworker.c) */
extern int	tsdg_worker_timeout_ms;
extern int	tsdg_worker_pending_rows;
/* the widest search (ef, or k) and the largest batch k the worker takes from a session */
extern int	tsdg_worker_max_ef_search;
extern int	tsdg_worker_max_k;

/*
 * A dynamic shared memory segment of size bytes owned by the current
 * resource owner, or NULL when none can be had (/dev/shm full, too many
 * segments); *failure, when not NULL, then holds the error's message.
 */
struct dsm_segment;
extern struct dsm_segment *TsdgTryCreateSegment(Size size, char **failure);

/* true when this session may send work to the worker now */
extern bool TsdgWorkerUsable(void);
/*
 * the same for a build or a merge, after waiting while the worker is busy; a
 * worker that cannot take it is counted as a fallback
 */
extern bool TsdgWorkerAwaitRequest(void);
/*
 * true when the worker's backend computes the metric's distances (the GPU
 * has no L1). Where it does not and fallback is set, the caller does the
 * index's work on the CPU instead: counted as a fallback, said once a session.
 */
extern bool TsdgWorkerComputes(TsdgMetric metric, bool fallback);


/* where a graph search by the worker leaves its results */
typedef struct TsdgWorkerResults
{
	uint32	   *ids;			/* max_results of each, filled by the search */
	float	   *dists;
	ItemPointerData *tids;
	int			count;
	/*
	 * the worker searched the index's pending rows too: the nearest of them
	 * are among the results with id TSDG_PENDING_ROW_ID, and those left out
	 * are no nearer than pending_bound
	 */
	bool		pending_searched;
	float		pending_bound;
} TsdgWorkerResults;

/*
 * One graph search by the worker: up to max_results node ids with their
 * comparison distances, ascending, and their heap TIDs (invalid for a node
 * deleted in the version searched), into results. False when the session
 * should search on the CPU instead (no worker, worker busy, timeout, worker
 * died, no DSM); results' count and pending fields are then as they were.
 */
extern bool TsdgWorkerSearch(Relation index, const TsdgMetaPageData *meta, const float *query,
							 int max_results, int ef, int lambda_limit,
							 TsdgWorkerResults *results);

/*
 * Where a batch of searches by the worker reads its queries and leaves its
 * results: the batch area of the main shared memory when no other session
 * uses it, else a shared memory segment this session keeps from one batch to
 * the next, so that a call copies neither the queries in nor the results out,
 * and rarely creates a segment.
 */
typedef struct TsdgBatchArea
{
	float	   *queries;		/* nq * dims, filled by the caller */
	ItemPointerData *tids;		/* nq * k, the results */
	float	   *dists;			/* nq * k */
	bool		shared;			/* in the batch area (tsdg.batch_memory) */
} TsdgBatchArea;

/*
 * The area for up to nq queries of dims and k results each, searched by the
 * metric; false when the worker cannot take the batch (the caller searches
 * on the CPU).
 */
extern bool TsdgWorkerBatchArea(TsdgMetric metric, int nq, int dims, int k, TsdgBatchArea *area);
/* after the results are read: the batch area released, the segment kept unless it is large */
extern void TsdgWorkerBatchAreaDone(void);

/*
 * Searches the first nq queries of the area on the worker, in one batch: for
 * each, k heap TIDs and comparison distances in the area (padded with invalid
 * TIDs / +inf), deleted nodes left out; the index's pending rows among them
 * when pending_searched is set. False when the session should search on the
 * CPU (the queries are still in the area).
 */
extern bool TsdgWorkerSearchBatch(Relation index, const TsdgMetaPageData *meta, int nq, int k,
								  int ef, int lambda_limit, bool *pending_searched);

/* where the last batch answered by the worker spent its round trip, in microseconds */
typedef struct TsdgRoundTrip
{
	int64		to_worker_us;	/* submitted until the worker took it */
	int64		on_worker_us;	/* taken until answered */
	int64		back_us;		/* answered until the session woke */
} TsdgRoundTrip;

extern TsdgRoundTrip TsdgLastBatchRoundTrip;

/*
 * Every row of a build in parts and its graph, in the session's own arrays
 * (past maintenance_work_mem, temporary files): the rows go to the worker
 * from here, the graph and k-NN lists come back here.
 */
typedef struct TsdgLocalBuildArrays
{
	const float *rows;			/* n * dims */
	const ItemPointerData *tids;	/* n */
	uint32	   *neighbors;		/* n * degree */
	uint8	   *lambdas;		/* n * degree */
	uint32	   *knn_ids;		/* n * build_k */
} TsdgLocalBuildArrays;

/*
 * The shared memory segment of a build on the worker: the heap scan writes
 * the rows and TIDs straight into it, the worker writes the graph and k-NN
 * lists into it, and the session writes its pages from it; nothing is copied
 * on the way. The arrays have room for capacity rows. A build in parts has
 * a segment for a part of the rows only, which carries them to the worker
 * and the graph back a part at a time while TsdgWorkerBuildGraph waits.
 */
typedef struct TsdgBuildSegment
{
	struct dsm_segment *seg;	/* NULL: none */
	struct TsdgRowsMapping *rows_mapping;	/* its row pages mapped ahead of the scan */
	int64		capacity;
	float	   *rows;			/* capacity * dims */
	ItemPointerData *tids;		/* capacity */
	uint32	   *neighbors;		/* capacity * degree */
	uint8	   *lambdas;		/* capacity * degree */
	uint32	   *knn_ids;		/* capacity * build_k */
	uint8	   *changed;		/* capacity; NULL in parts (tsdg_build_graph_marked) */
	struct TsdgBuildSummary *summary;
	/* the navigating layer's lists, which the worker writes with the summary */
	uint32	   *layer_ids;
	uint8	   *layer_lambdas;
	pid_t		builder_pid;	/* the worker process that answered the build */

	/* a build in parts: its turns (NULL: none) and the session's arrays */
	struct TsdgPartTurns *parts;
	TsdgLocalBuildArrays local;

	/*
	 * Called (when set) while TsdgWorkerBuildGraph waits for the worker:
	 * while_building once (in parts, once every row is sent), for what needs
	 * no graph (the row pages); then knn_ready once the worker's k-NN lists
	 * are final in knn_ids while it diversifies, for the k-NN pages; then
	 * lists_ready each time more search lists are in neighbors and lambdas
	 * (the first rows of them) while the worker checks the graph, for the
	 * list pages: the lists the check changes afterwards have
	 * TSDG_CHANGED_LINK in changed once the worker answers. Never in parts,
	 * whose graph comes back after the build. They may throw; the worker is
	 * then told to stop.
	 */
	void		(*while_building) (void *arg);
	void		(*knn_ready) (void *arg);
	void		(*lists_ready) (void *arg, int64 rows);
	void	   *hook_arg;
	int64		lists_seen;		/* what lists_ready was last called with */
} TsdgBuildSegment;

/*
 * A segment for capacity rows, or false (with a WARNING where the user should
 * know) when there is none to be had: the caller builds in local memory.
 */
extern bool TsdgBuildSegmentCreate(TsdgBuildSegment *bseg, int64 capacity, int dims,
								   const TsdgBuildParams *params);
/*
 * Moves the first count rows into a new segment for capacity rows. False
 * when it cannot be created; the old segment is then unchanged.
 */
extern bool TsdgBuildSegmentGrow(TsdgBuildSegment *bseg, int64 count, int64 capacity, int dims,
								 const TsdgBuildParams *params);
extern void TsdgBuildSegmentRelease(TsdgBuildSegment *bseg);

/* the rows a build segment of at most max_bytes holds (at least one) */
extern int64 TsdgBuildSegmentRowsWithin(Size max_bytes, int dims, const TsdgBuildParams *params,
										int64 parts_of);

/*
 * A segment of at most max_bytes for a build in parts of the n rows in
 * local (the graph comes back there too), or false as TsdgBuildSegmentCreate.
 */
extern bool TsdgBuildSegmentCreateInParts(TsdgBuildSegment *bseg, Size max_bytes, int64 n,
										  int dims, const TsdgBuildParams *params,
										  const TsdgLocalBuildArrays *local);

/*
 * tsdg_build_graph on the worker's device for the first n rows of the
 * segment; the graph and k-NN lists are left in the segment (for a build in
 * parts: of the rows in its local arrays, the graph left there). Returns false
 * when the worker cannot take the build (no worker, device out of memory; a
 * WARNING says so where the user should know) and the caller builds on the
 * CPU; otherwise *status is the result of the build. The worker keeps the
 * fresh graph resident as graph version 1 of the index.
 */
extern bool TsdgWorkerBuildGraph(Relation index, TsdgBuildSegment *bseg, int64 n, int dims,
								 TsdgMetric metric, const TsdgBuildParams *params,
								 TsdgPollFn poll, void *poll_arg,
								 TsdgStatus *status, TsdgError *error);

/*
 * The entry points and d_nn1+ the worker computes after a build it answered
 * with TSDG_OK, into meta, waiting for them when needed. False when the
 * worker could not compute them (it died, or failed): the caller computes
 * them itself.
 */
extern bool TsdgWorkerBuildSummary(TsdgBuildSegment *bseg, TsdgMetaPageData *meta);
/* the same without waiting: false while the worker computes them (or failed) */
extern bool TsdgWorkerBuildSummaryIn(TsdgBuildSegment *bseg, TsdgMetaPageData *meta);
/*
 * The navigating layer of the n rows the worker computed beside the summary
 * (in the segment), once the summary is in; false when it did not.
 */
extern bool TsdgWorkerBuildLayer(TsdgBuildSegment *bseg, int64 n, uint32 **ids, uint8 **lambdas);
/*
 * Tell the worker about the build's rings of identical rows, which it waits
 * for after its answer before it reads the lists again (for the summary and
 * its resident copy): once the groups are found, whether there are any to
 * link; then whether rings were linked (none where the session gives the
 * build up). Nothing for a build in parts, whose lists the worker holds
 * apart.
 */
extern void TsdgBuildSegmentRingsFound(TsdgBuildSegment *bseg, bool any);
extern void TsdgBuildSegmentRingsLinked(TsdgBuildSegment *bseg, bool any);

/*
 * The shared memory segment of a merge on the worker, made before the merge
 * reads the index: the session reads the live nodes straight into it, the
 * worker reads its inputs and writes the merged graph there, and the session
 * writes its pages from it. The arrays have room for old_capacity live nodes
 * and new_capacity pending rows.
 */
typedef struct TsdgMergeSegment
{
	struct dsm_segment *seg;	/* NULL: none */
	int64		old_capacity;
	int64		new_capacity;
	int64		rows_from;		/* 0, or old_capacity: the worker has the old rows */
	float	   *rows;			/* (old_capacity + new_capacity - rows_from) * dims */
	ItemPointerData *tids;		/* old_capacity + new_capacity */
	uint32	   *old_knn_ids;	/* old_capacity * build_k; NULL without old lists */
	float	   *old_knn_dists;	/* old_capacity * build_k; NULL without old distances */
	uint32	   *old_neighbors;	/* old_capacity * degree; NULL without old lists */
	uint8	   *old_lambdas;	/* old_capacity * degree; NULL without old lists */
	uint8	   *old_changed;	/* old_capacity, zeroed */
	uint32	   *knn_ids;		/* (old_capacity + new_capacity) * build_k, the answer;
								 * NULL when the worker keeps them alone */
	uint32	   *neighbors;		/* (old_capacity + new_capacity) * degree */
	uint8	   *lambdas;
	uint8	   *changed;		/* old_capacity + new_capacity */
	struct TsdgBuildSummary *summary;	/* of the merged graph, after the answer */
	uint32	   *layer_ids;		/* its navigating layer, with the summary */
	uint8	   *layer_lambdas;
	pid_t		summary_pid;	/* the worker that computes it; 0: none does */

	/*
	 * No segment: one of the whole merge would pass maintenance_work_mem, so
	 * the merge keeps its arrays and TsdgWorkerMergeGraph sends them in parts
	 * (what the worker's copy holds is still left to it). parts_seg is the
	 * segment of parts once the worker merged through it: it holds the
	 * summary.
	 */
	bool		in_parts;
	struct dsm_segment *parts_seg;

	/*
	 * Called (when set) while TsdgWorkerMergeGraph waits: while_merging once
	 * at the start (the caller writes what needs no graph: the new rows),
	 * knn_ready once the worker's merged k-NN lists are in knn_ids and it
	 * diversifies (the caller writes them out meanwhile), lists_ready each
	 * time the search lists of more rows, in row order, are in neighbors and
	 * lambdas (the worker links the graph's components after the last; the
	 * lists that changes get TSDG_CHANGED_LINK in changed). They may throw;
	 * the worker is then told to stop. They run once more after an answer
	 * OK (answered set), when every list is published.
	 */
	void		(*while_merging) (void *arg);
	void		(*knn_ready) (void *arg);
	void		(*lists_ready) (void *arg, int64 rows);
	int64		lists_seen;		/* what lists_ready was last called with */
	bool		answered;		/* the hooks run once more after the answer */
	void	   *hook_arg;
} TsdgMergeSegment;

/*
 * What a merge segment carries besides the new rows, every row's TID and the
 * merged search graph. The kernel zeroes a segment's pages when the session
 * makes it: what is left out saves that time before the request, and the
 * worker's own copies reuse the memory of the graph two merges back.
 */
typedef struct TsdgMergeSegmentContents
{
	bool		old_rows;		/* false: the worker holds them (TSDG_COPY_ROWS or more) */
	bool		old_lists;		/* the old k-NN and search lists; false: the worker holds
								 * them (TSDG_COPY_GRAPH) */
	bool		old_knn_dists;	/* the merge drops deleted nodes: the old k-NN lists come
								 * with distances */
	bool		merged_knn;		/* false: the caller keeps its k-NN pages, so only the
								 * worker needs the merged k-NN lists */
} TsdgMergeSegmentContents;

/*
 * A segment for a merge when the worker takes requests now, or false (the
 * merge then reads into local memory, and TsdgWorkerMergeGraph copies it,
 * in parts when mseg->in_parts says the segment would pass
 * maintenance_work_mem).
 */
extern bool TsdgMergeSegmentCreate(TsdgMergeSegment *mseg, int64 old_capacity, int64 new_capacity,
								   int dims, const TsdgBuildParams *params,
								   const TsdgMergeSegmentContents *contents);
extern void TsdgMergeSegmentRelease(TsdgMergeSegment *mseg);

/*
 * The entry points, d_nn1+ and unreached rows of the graph the worker merged
 * into mseg, computed by the worker after its answer, into meta; waits for
 * them. False when no worker computes them or it failed or died: the caller
 * computes them.
 */
extern bool TsdgWorkerMergeSummary(TsdgMergeSegment *mseg, TsdgMetaPageData *meta);
/*
 * The navigating layer of the merged graph of n rows the worker computed
 * beside the summary (in the segment), once the summary is in; false when it
 * did not (the caller computes it).
 */
extern bool TsdgWorkerMergeLayer(TsdgMergeSegment *mseg, int64 n, uint32 **ids, uint8 **lambdas);

/* what the worker's copy of an index's graph has */
typedef enum TsdgWorkerCopy
{
	TSDG_COPY_NONE,				/* none is resident */
	TSDG_COPY_ROWS,				/* the rows and search lists, shipped for searches */
	TSDG_COPY_GRAPH				/* the k-NN lists too: the worker built or merged it */
} TsdgWorkerCopy;

/*
 * What the worker holds of the graph of meta, so that a merge may leave the
 * old rows, or the whole old graph, to it (TsdgWorkerMergeGraph's left). It
 * may drop it before the merge reaches it.
 */
extern TsdgWorkerCopy TsdgWorkerCopyOf(Relation index, const TsdgMetaPageData *meta);

typedef enum TsdgWorkerMerge
{
	TSDG_WORKER_MERGED,			/* the merged graph is in the caller's arrays */
	TSDG_WORKER_NEEDS_OLD_GRAPH,	/* the worker dropped what was left to it: read it, ask again */
	TSDG_WORKER_DECLINED		/* the caller computes it on the CPU */
} TsdgWorkerMerge;

/*
 * The arrays of a merge's computation (tsdg_merge_graph_incremental's, which
 * the session calls with the same values when the worker declines): n_old +
 * n_new rows and their TIDs, old first, the old rows' k-NN and search lists
 * in, the merged k-NN ids, search graph and changed flags out.
 */
typedef struct TsdgMergeData
{
	const ItemPointerData *tids;
	const float *rows;
	int64		n_old;
	int64		n_new;
	int			dims;
	TsdgMetric	metric;
	const TsdgBuildParams *params;
	const uint32 *old_knn_ids;
	const float *old_knn_dists;	/* NULL: the worker computes them */
	const uint32 *old_neighbors;
	const uint8 *old_lambdas;
	const uint8 *old_changed;	/* NULL: no old list was repaired */
	uint32	   *knn_ids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint8	   *changed;
} TsdgMergeData;

/*
 * A merge's graph computed by the worker (for tsdgmergecompute.c's
 * TsdgMergeComputeGraph): the inputs travel in a shared memory segment, the
 * merged k-NN ids, search graph and changed flags come back into data's
 * arrays. When the arrays are those of mseg (not NULL), nothing is copied,
 * and the worker computes the merged graph's entry points after its answer
 * (TsdgWorkerMergeSummary). Otherwise, where a segment of the whole merge
 * would pass maintenance_work_mem (or mseg->in_parts), the inputs and the
 * merged graph travel in parts through one that does not; the worker then
 * computes the summary before it sends the graph back, repaired for the
 * rows its searches do not reach.
 *
 * old_meta is the metapage the merge read; with left (only with mseg) above
 * TSDG_COPY_NONE, the first n_old rows and TIDs, and with TSDG_COPY_GRAPH the
 * old k-NN and search lists too, are not read yet: the worker takes them from
 * its copy of that graph. The worker then keeps the merged graph resident
 * under the key of new_meta, what the metapage says after the switch.
 *
 * DECLINED when the caller computes it on the CPU instead (no worker, busy,
 * no shared memory, worker died or failed: a LOG or, for GPU memory, a
 * WARNING says so). A query cancel while waiting throws, and the worker
 * stops at its next poll.
 */
extern TsdgWorkerMerge TsdgWorkerMergeGraph(Relation index, TsdgMergeSegment *mseg,
											const TsdgMetaPageData *old_meta, TsdgWorkerCopy left,
											const TsdgMetaPageData *new_meta,
											const TsdgMergeData *data);

#endif							/* TSDG_WORKER_CLIENT_H */
