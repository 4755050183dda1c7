/*
 * The GPU worker's processes (worker/server): the supervisor, a background
 * worker that keeps one GPU server process running (tsdgworker.c), and the
 * GPU server, which owns the only CUDA context of the cluster
 * (tsdggpuserver.c and the files of its requests, which share
 * tsdggpuserver.h). Nothing here is called from a session; the sessions'
 * side is declared in tsdgworkerclient.h, the shared memory both sides use in
 * tsdgipc.h.
 */
#ifndef TSDG_WORKER_SERVER_H
#define TSDG_WORKER_SERVER_H

#include "postgres.h"

typedef enum TsdgWorkerBackend
{
	TSDG_WORKER_BACKEND_CUDA,	/* the CUDA backend, pg_tsdg_cuda.so */
	TSDG_WORKER_BACKEND_CPU		/* the core's CPU backend: the worker path without a GPU */
} TsdgWorkerBackend;

/* settings of the worker's processes */
extern int	tsdg_batch_wait_us;
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

/*
 * tsdghostarrays.c: the worker's host arrays of merged graphs, reused from
 * graphs it dropped. Take returns NULL when the memory is not to be had.
 */
extern void *TsdgTakeHostArray(Size bytes);
extern void TsdgGiveBackHostArray(void *array);
extern void TsdgReleaseIdleHostArrays(void);

#endif							/* TSDG_WORKER_SERVER_H */
