/*
 * What the files of the session's side of the GPU worker share
 * (tsdgoffload.c and the files of its requests): the fallbacks' accounting,
 * the key and segments of a request, the replies of searches. Runs in the
 * sessions only.
 */
#ifndef TSDG_OFFLOAD_H
#define TSDG_OFFLOAD_H

#include "postgres.h"

#include "storage/dsm.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgipc.h"
#include "tsdgparts.h"
#include "tsdgworkerclient.h"

/* each kind of fallback is logged once per session, not once per query */
typedef enum TsdgFallbackKind
{
	TSDG_FALLBACK_TIMEOUT,
	TSDG_FALLBACK_WORKER_GONE,
	TSDG_FALLBACK_OUT_OF_MEMORY,
	TSDG_FALLBACK_FAILED,
	TSDG_FALLBACK_TOO_WIDE,
	TSDG_FALLBACK_METRIC,
	TSDG_FALLBACK_KINDS
} TsdgFallbackKind;

/* tsdgoffload.c */
extern void TsdgCountFallback(void);
extern dsm_segment *TsdgCreateBulkSegment(Size size, const char *what);
extern void TsdgIndexKeyOf(Relation index, const TsdgMetaPageData *meta, TsdgIndexKey *key);
extern void TsdgLogFallback(TsdgFallbackKind kind, const char *what, const char *detail);
extern pid_t TsdgServerPid(void);
extern bool TsdgWorkerTakesRequest(void);
extern bool TsdgWorkerTakesWidth(int ef, int k, bool batch);

/* tsdgoffloadimage.c */
extern void TsdgSetUnreachedCheck(TsdgUnreachedCheck *check, const TsdgMetaPageData *meta);
extern bool TsdgShipIndex(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key);

/* tsdgoffloadsearch.c */

/* a search for the worker: one query or a batch, and what its kind adds to the slot */
typedef struct TsdgSearchRequest
{
	TsdgRequestKind kind;		/* TSDG_REQUEST_SEARCH or TSDG_REQUEST_SEARCH_BATCH */
	int			k;
	int			ef;
	int			lambda_limit;
	int			nq;
	/* wait while the worker lives, busy or not; else tsdg.worker_timeout_ms */
	bool		until_answered;
	/* writes the queries' part of the slot: the query inline, or where the batch lies */
	void		(*fill) (TsdgRequestSlot *slot, void *arg);
	/* optional: told after each wait whether an answer came */
	void		(*waited) (bool answered, void *arg);
	void	   *arg;
} TsdgSearchRequest;

extern TsdgRequestSlot *TsdgSendSearch(Relation index, const TsdgMetaPageData *meta,
									   const TsdgSearchRequest *request,
									   TimestampTz *submitted_at);

/* tsdgoffloadbuild.c */
/* the bytes of a build segment for capacity rows (one part of parts_of rows; 0: not in parts) */
extern Size TsdgBuildSegmentBytes(int64 capacity, int dims, const TsdgBuildParams *params,
								  int64 parts_of);
extern bool TsdgBuildSegmentMake(TsdgBuildSegment *bseg, int64 capacity, int dims,
								 const TsdgBuildParams *params, int64 parts_of);
extern void TsdgRunHookOnce(void (**hook) (void *), void *arg);
extern void TsdgRunReadyHooks(TsdgBuildSummary *summary, void (**knn_ready) (void *),
							  void (*lists_ready) (void *, int64), int64 *lists_seen, void *arg);
extern bool TsdgWaitSummary(TsdgBuildSummary *summary, pid_t pid, TsdgMetaPageData *meta);
/*
 * The navigating layer the worker put beside a READY summary of a graph of n
 * rows (seg_ids and seg_lambdas, in its segment) into *ids and *lambdas; false
 * when it did not (the caller computes it).
 */
extern bool TsdgSummaryLayer(TsdgBuildSummary *summary, uint32 *seg_ids, uint8 *seg_lambdas,
							 int64 n, uint32 **ids, uint8 **lambdas);

/* tsdgoffloadbuildparts.c */
/*
 * The turns of a build in parts that are the session's now: the next part of
 * the rows once the worker took the last, the graph's parts the worker sent.
 * True once every row is sent.
 */
extern bool TsdgTakeBuildTurns(TsdgBuildSegment *bseg, int64 n, int dims,
							   const TsdgBuildParams *params);

/* tsdgoffloadmerge.c */
/* the most bytes of a merge's segment: maintenance_work_mem */
extern Size TsdgMergeSegmentLimit(void);
/* this session's slot with a merge request of data's sizes and keys, not submitted yet */
extern TsdgRequestSlot *TsdgBeginMergeRequest(Relation index, const TsdgMetaPageData *old_meta,
											  TsdgWorkerCopy left, const TsdgMetaPageData *new_meta,
											  const TsdgMergeData *data);
/* what a merge the worker did not answer with OK comes to, logged and counted where it falls back */
extern TsdgWorkerMerge TsdgMergeNotAnswered(Relation index, bool answered, TsdgReply reply,
											TsdgWorkerCopy left, const char *message);

/* tsdgoffloadmergeparts.c */
/*
 * TsdgWorkerMergeGraph through a segment of at most maintenance_work_mem,
 * for arrays that are the caller's own (mseg made no segment of them).
 */
extern TsdgWorkerMerge TsdgWorkerMergeInParts(Relation index, TsdgMergeSegment *mseg,
											  const TsdgMetaPageData *old_meta, TsdgWorkerCopy left,
											  const TsdgMetaPageData *new_meta,
											  const TsdgMergeData *data);

#endif							/* TSDG_OFFLOAD_H */
