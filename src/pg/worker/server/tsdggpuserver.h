/*
 * What the files of the GPU server process share (tsdggpuserver.c and the
 * files of its requests: tsdgservercache.c, tsdgserverload.c,
 * tsdgserverunreached.c, tsdgserversearch.c, tsdgserverbatch.c,
 * tsdgserverbuild.c, tsdgservermerge.c, tsdgservermergeparts.c,
 * tsdgserverparts.c, tsdgserverlayer.c): a request taken from its slot, the
 * mapping of its segment, the resident indexes. Nothing here runs in a
 * session.
 */
#ifndef TSDG_GPU_SERVER_H
#define TSDG_GPU_SERVER_H

#include "postgres.h"

#include <signal.h>

#include "tsdg.h"
#include "tsdgipc.h"
#include "tsdgparts.h"
#include "tsdgworkerserver.h"

/* the device's backend; NULL: the core's CPU backend */
extern TsdgBackend *TsdgDeviceBackend;
extern volatile sig_atomic_t TsdgServerShutdownRequested;

typedef struct BulkMapping
{
	dsm_handle	handle;
	void	   *impl_private;
	void	   *address;
	Size		size;
} BulkMapping;

/*
 * An index the server holds resident: the core's TsdgResidentIndex (what its
 * searches run on) and what the server keeps beside it
 */
typedef struct ResidentIndex
{
	bool		used;
	TsdgIndexKey key;
	TsdgResidentIndex *index;
	int64		n;
	int			dims;
	TsdgMetric	metric;
	ItemPointerData *tids;		/* n, for batch answers */
	uint8	   *flags;			/* n node flags, NULL when none is deleted */
	/*
	 * host arrays: the rows and the search graph, which the core's index
	 * reads (the CPU's searches, the GPU's entry points), and for the next
	 * merge the k-NN lists when the worker built or merged the graph itself
	 * (knn_ids NULL for a shipped image)
	 */
	float	   *rows;
	uint32	   *neighbors;
	uint8	   *lambdas;
	int			degree;
	uint32	   *knn_ids;
	int			knn_k;
	/* the request's segment the arrays above lie in; address NULL: malloc'd copies */
	BulkMapping segment;
	/* rows and knn_ids where they are the worker's own (TsdgTakeHostArray), or NULL */
	float	   *owned_rows;
	uint32	   *owned_knn_ids;
	/* the page-locked pages of knn_ids (the next merge uploads them), or NULL */
	void	   *pinned_lists;
	/*
	 * the index's pending rows at pending_epoch, in list order (NULL until a
	 * session sends some), with their heap TIDs (malloc'd)
	 */
	TsdgExactSet *pending;
	ItemPointerData *pending_tids;
	int64		pending_capacity;
	uint64		pending_epoch;
	BlockNumber pending_end_block;	/* where the last of them lies (TsdgPendingArgs) */
	int			pending_end_offset;
	/*
	 * the newest rows its searches do not reach (TsdgFindUnreached), ascending
	 * (malloc'd), and their rows, scored exactly for every search; NULL
	 * when none
	 */
	uint32	   *unreached;
	int64		unreached_count;
	TsdgExactSet *unreached_set;
	int64		bytes;
	TimestampTz loaded_at;
	TimestampTz last_used;
} ResidentIndex;

/* a request taken out of its slot for this batch */
typedef struct TakenRequest
{
	TsdgRequestSlot *slot;
	TsdgRequestSlot copy;		/* without the payload */
	float	   *query;			/* inline searches */
	bool		done;
} TakenRequest;

/* a graph to make resident (TsdgAddResident says who owns its arrays afterwards) */
typedef struct ResidentGraph
{
	const float *rows;
	int64		n;
	int			dims;
	TsdgMetric	metric;
	int			degree;
	const uint32 *neighbors;
	const uint8 *lambdas;
	const uint32 *knn_ids;		/* n * knn_k, or NULL */
	int			knn_k;
	const ItemPointerData *tids;
	const uint8 *flags;			/* NULL: none deleted */
	/* rows, knn_ids where they are the worker's own (TsdgTakeHostArray); or NULL */
	float	   *own_rows;
	uint32	   *own_knn_ids;
	/*
	 * the graph whose rows are the first same_rows_n of rows (a merge's old
	 * graph, when the worker's copy gave them), or NULL
	 */
	const TsdgIndexKey *same_rows_key;
	int64		same_rows_n;
	/* the navigating layer's lists (copied), layer_nodes * degree; 0 nodes: none */
	const uint32 *layer_ids;
	const uint8 *layer_lambdas;
	int64		layer_nodes;
} ResidentGraph;

/* the navigating layer of a graph the server built or merged (malloc'd) */
typedef struct ServerLayer
{
	uint32	   *ids;
	uint8	   *lambdas;
	int64		nodes;			/* 0: the graph has none */
	int			degree;
} ServerLayer;

typedef struct BuildPollState
{
	TakenRequest *request;
} BuildPollState;

/*
 * The arrays a build reads and writes: in its segment, or for a build in
 * parts the worker's own (rows and knn_ids from TsdgTakeHostArray, the
 * others malloc'd), where the parts are copied to and from.
 */
typedef struct BuildArrays
{
	float	   *rows;
	ItemPointerData *tids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint32	   *knn_ids;
} BuildArrays;

/* tsdggpuserver.c */
extern bool TsdgMapBulk(const TsdgRequestSlot *request, BulkMapping *map);
extern bool TsdgBulkFits(const BulkMapping *map, Size offset, Size bytes);
extern bool TsdgBulkHasArray(const BulkMapping *map, Size offset, int64 count, Size elem_size,
							 bool optional);
/* build_k 0: the request has no k-NN lists */
extern bool TsdgGraphSizesValid(int64 n, int dims, int degree, int build_k);
extern TsdgReply TsdgReplyOf(TsdgStatus status);
extern double TsdgSecondsSince(TimestampTz start);
extern void TsdgUnmapBulk(BulkMapping *map);
/*
 * Sleeps up to max_ms on the server's semaphore unless *counter is target or
 * more: a session posts it after each turn of a build in parts.
 */
extern void TsdgServerNap(pg_atomic_uint64 *counter, uint64 target, int max_ms);

/* tsdgservercache.c */
extern TsdgStatus TsdgAddResident(const TsdgIndexKey *key, const ResidentGraph *g,
								  const TsdgIndexKey *keep, BulkMapping *map, TsdgError *error);
extern void *TsdgCopyOut(const void *src, Size bytes);
extern void TsdgDropOlderGraphs(const ResidentIndex *r);
extern void TsdgEvictAll(const char *why);
extern void TsdgEvictForBuild(int64 n, int dims, const TsdgBuildParams *params);
extern void TsdgDropGoneIndexes(void);
extern ResidentIndex *TsdgFindResident(const TsdgIndexKey *key);
extern ResidentIndex *TsdgLeastRecentlyUsed(void);
extern void TsdgPinListsOf(const TsdgIndexKey *key);
extern void TsdgServePendingRows(TakenRequest *t);

/* tsdgserverload.c */
extern bool TsdgPromiseLoad(const TsdgIndexKey *key);
extern void TsdgServeLoad(TakenRequest *t);

/* tsdgserverunreached.c */
extern bool TsdgFindUnreached(ResidentIndex *r, const TsdgUnreachedCheck *check,
							  uint8 *repair_changed, const uint32 *known, int64 known_count,
							  TsdgError *error);

/* tsdgserversearch.c */
/* the nq queries' exact nearest unreached rows of r (uk each, positions into r->unreached), palloc'd */
extern TsdgStatus TsdgSearchUnreached(const ResidentIndex *r, const float *queries, int nq, int uk,
									  uint32 **positions, float **dists, TsdgError *error);
/* true when the worker's copy of r's pending rows is the one args's metapage has, or more */
extern bool TsdgPendingCopyCovers(const ResidentIndex *r, const TsdgSearchArgs *args);
/*
 * The k nearest of one query's graph results (graph_count of them, with
 * their TIDs; ids may be NULL) and of its pending_k nearest pending rows
 * (positions into r's copy, TSDG_INVALID_ID padded), into out_*; out_ids may
 * be NULL. Returns how many results were written.
 */
extern int	TsdgMergePendingResults(const ResidentIndex *r, int k, int graph_count,
									const float *graph_dists, const uint32 *graph_ids,
									const ItemPointerData *graph_tids, int pending_k,
									const uint32 *pending_pos, const float *pending_dists,
									float *out_dists, uint32 *out_ids, ItemPointerData *out_tids);
extern void TsdgServeSearchGroup(TakenRequest *taken, int ntaken, int first);

/* tsdgserverbatch.c */
extern void TsdgStartSearchBatch(TakenRequest *t);
extern bool TsdgSearchBatchesRunning(void);
extern void TsdgContinueSearchBatches(void);
extern void TsdgFailSearchBatches(const char *why);

/* tsdgserverbuild.c */
extern bool TsdgPollBuildRequest(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total);
extern void TsdgPublishReadyLists(TakenRequest *request, TsdgBuildSummary *summary,
								  TsdgBuildPhase phase, int64 lists);
extern void TsdgTurnAwaySearches(void);
extern void TsdgPublishSummary(TakenRequest *t, TsdgBuildSummary *summary, bool ok);
extern void TsdgServeBuild(TakenRequest *t);

/* tsdgserverlayer.c */
/*
 * Room for the layer of a graph of n rows, for the build or merge to write
 * (no room where the graph has no layer, or the host no memory for it);
 * TsdgLayerWritten once it has.
 */
extern void TsdgMakeRoomForLayer(int64 n, const TsdgBuildParams *params, ServerLayer *layer);
extern void TsdgLayerWritten(ServerLayer *layer, int64 n);
/*
 * The layer of a graph of n rows, where the build or merge did not write it,
 * on the worker's backend; false (LOG) when it could not be computed, layer
 * then empty.
 */
extern bool TsdgComputeLayer(const float *rows, int64 n, int dims, TsdgMetric metric,
							 const TsdgBuildParams *params, Oid database, Oid relfilenode,
							 ServerLayer *layer);
/* the layer into the session's segment, summary->layer_nodes saying so, before the summary's state */
extern void TsdgLayerIntoSegment(const ServerLayer *layer, void *base, const TsdgBulkHeader *header,
								 TsdgBuildSummary *summary);
extern void TsdgFreeLayer(ServerLayer *layer);

/* tsdgserverparts.c */
/*
 * The in-parts of a request in parts (its segment at base, its turns there),
 * received into the stream's arrays; false when the session gave the
 * request up first.
 */
extern bool TsdgReceiveParts(TakenRequest *t, TsdgPartTurns *turns, void *base,
							 const TsdgPartStream *in);
/* its out-parts sent back; false when the session gave the request up first */
extern bool TsdgSendParts(TakenRequest *t, TsdgPartTurns *turns, void *base,
						  const TsdgPartStream *out);

/* tsdgservermergeparts.c */
/*
 * Whether a merge in parts names an index's sizes and its segment holds a
 * part of capacity rows (at most the merge's rows) of every array that
 * travels, and its turns.
 */
extern bool TsdgMergePartSizesFit(const TsdgMergeArgs *args, const BulkMapping *map);
/*
 * The worker's own arrays of a merge in parts, whole: what comes in is
 * received there, what the merge computes goes back from there. False when
 * the memory is not to be had (TsdgFreeMergePartArrays frees what was).
 */
extern bool TsdgTakeMergePartArrays(const TsdgMergeArgs *args, const TsdgBulkHeader *header,
									TsdgMergePartArrays *own);
extern void TsdgFreeMergePartArrays(TsdgMergePartArrays *own);

/* tsdgservermerge.c */
extern void TsdgServeMerge(TakenRequest *t);

#endif							/* TSDG_GPU_SERVER_H */
