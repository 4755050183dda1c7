/*
 * The GPU worker of pg_tsdg: a background worker (the supervisor) that keeps
 * one GPU server process running, which owns the only CUDA context of the
 * cluster, builds graphs and answers the searches of every session in
 * batches. Sessions talk to it through the request slots of tsdgipc.h; these
 * are the calls the access method and the SQL functions make.
 */
#ifndef TSDG_WORKER_H
#define TSDG_WORKER_H

#include "postgres.h"

#include "storage/itemptr.h"
#include "utils/relcache.h"

#include "tsdg.h"
#include "tsdg_capi.h"

typedef enum TsdgWorkerBackend
{
	TSDG_WORKER_BACKEND_CUDA,	/* the CUDA backend, pg_tsdg_cuda.so */
	TSDG_WORKER_BACKEND_CPU		/* the core's CPU backend: the worker path without a GPU */
} TsdgWorkerBackend;

/* GUCs */
extern int	tsdg_batch_wait_us;
extern int	tsdg_worker_timeout_ms;
extern int	tsdg_gpu_memory_limit_mb;
extern int	tsdg_worker_backend;
extern int	tsdg_gpu_device_number;

/* tsdgworker.c: GUCs, shared memory and the worker's registration (_PG_init) */
extern void TsdgWorkerInit(void);
extern PGDLLEXPORT void TsdgWorkerSupervisorMain(Datum main_arg);

/* tsdggpuserver.c: the GPU server process, forked by the supervisor */
extern void TsdgGpuServerMain(void) pg_attribute_noreturn();

/* tsdggpumemory.c: the device's free and total memory, for tsdg_gpu_status() */
extern void TsdgPublishDeviceMemory(void);

/* tsdgoffload.c: what a session hands to the worker */

/* true when this session may send work to the worker now */
extern bool TsdgWorkerUsable(void);

/*
 * One graph search by the worker: up to max_results node ids with their
 * comparison distances, ascending. False when the session should search on
 * the CPU instead (no worker, worker busy, timeout, worker died, no DSM).
 */
extern bool TsdgWorkerSearch(Relation index, const TsdgMetaPageData *meta, const float *query,
							 int max_results, int ef, int lambda_limit,
							 uint32 *ids, float *dists, int *count);

/*
 * Many searches by the worker in one batch: for each of nq queries, k heap
 * TIDs and comparison distances (padded with invalid TIDs / +inf), deleted
 * nodes left out. False when the session should search on the CPU.
 */
extern bool TsdgWorkerSearchBatch(Relation index, const TsdgMetaPageData *meta,
								  const float *queries, int nq, int k, int ef, int lambda_limit,
								  ItemPointerData *tids, float *dists);

/*
 * tsdg_build_graph on the worker's device. Returns false when the worker
 * cannot take the build (no worker, no DSM, device out of memory; a WARNING
 * says so where the user should know) and the caller builds on the CPU;
 * otherwise *status is the result of the build. knn_ids/knn_dists receive
 * the k-NN graph when not NULL, as from tsdg_build_graph. tids (node order)
 * let the worker keep the fresh graph resident as graph version 1 of the
 * index.
 */
extern bool TsdgWorkerBuildGraph(Relation index, const ItemPointerData *tids,
								 const float *rows, int64 n, int dims, TsdgMetric metric,
								 const TsdgBuildParams *params, uint32 *neighbors, uint8 *lambdas,
								 uint32 *knn_ids, float *knn_dists,
								 TsdgPollFn poll, void *poll_arg,
								 TsdgStatus *status, TsdgError *error);

/* tsdgindeximage.c: the whole graph of an index as arrays (CPU batch search, shipping) */
typedef struct TsdgIndexImage
{
	int64		n;
	int			dims;
	int			degree;
	float	   *rows;			/* n * dims */
	uint32	   *neighbors;		/* n * degree */
	uint8	   *lambdas;		/* n * degree */
	ItemPointerData *tids;		/* n */
	uint8	   *flags;			/* n: TsdgNodeHeader flags */
} TsdgIndexImage;

/* Reads every node record into the image's arrays, which the caller sized. */
extern void TsdgReadIndexImage(Relation index, const TsdgMetaPageData *meta,
							   TsdgIndexImage *image);

#endif							/* TSDG_WORKER_H */
