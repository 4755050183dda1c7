/*
 * Writing a run of pages with parallel workers.
 *
 * One backend fills and WAL-logs list, k-NN and row pages at a few hundred
 * MB/s (the buffer lookups, the WAL record's copy and CRC, the WAL writes);
 * a merge into 2M rows rewrites about 830 MB of them, and that, not the
 * disk, bounds it (docs/benchmarks.md, "Incremental merge, fourth pass").
 * When the arrays the pages are filled from lie in a DSM segment (the GPU
 * worker's build or merge segment), the pages are split between this
 * backend and up to max_parallel_maintenance_workers parallel workers, as
 * PostgreSQL's own parallel index builds use them: every participant claims
 * chunks of pages from a shared counter and writes them as TsdgWritePages
 * does. The pages are new contents written into blocks no scan reads, so the
 * participants need no coordination beyond the counter.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/lmgr.h"
#include "storage/shm_toc.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "tsdg.h"

#define TSDG_PARALLEL_WRITE_KEY		UINT64CONST(0x7453444750570001)
/* a participant's claim: 2 MB, a few WAL records */
#define TSDG_PARALLEL_CHUNK_PAGES	256

/* pages per participant below which starting a worker costs more than it saves */
int			tsdg_min_parallel_write_size = 4096;

void
TsdgParallelInit(void)
{
	DefineCustomIntVariable("tsdg.min_parallel_write_size",
							"Sets the pages a tsdg build or merge writes per participant before it starts a parallel worker.",
							"The pages of a build or merge on the GPU worker are written by the session and up to "
							"max_parallel_maintenance_workers parallel workers, one more for each such share.",
							&tsdg_min_parallel_write_size, 4096, 1, INT_MAX / 2,
							PGC_USERSET, GUC_UNIT_BLOCKS, NULL, NULL, NULL);
}

/* what every participant needs: the arrays as offsets into their segment */
typedef struct TsdgParallelWrite
{
	Oid			indexrelid;
	dsm_handle	arrays_handle;
	Size		tids;			/* byte offsets in the arrays' segment, 0: absent */
	Size		rows;
	Size		neighbors;
	Size		lambdas;
	Size		knn_ids;
	int64		n;
	int			knn_k;
	TsdgLayout	layout;
	bool		row_run;		/* pages of a row run, else of a region */
	uint32		extent_first;
	uint32		run_first;
	uint32		run_end;
	BlockNumber start;
	BlockNumber end;
	pg_atomic_uint32 next;		/* the next unclaimed page */
} TsdgParallelWrite;

PGDLLEXPORT void TsdgParallelWriteMain(dsm_segment *seg, shm_toc *toc);

/* the offset of p in the segment at base of size bytes, or false when it lies elsewhere */
static bool
TsdgOffsetIn(const void *p, const char *base, Size size, Size *offset)
{
	const char *c = p;

	*offset = 0;
	if (p == NULL)
		return true;
	if (c <= base || c >= base + size)
		return false;
	*offset = (Size) (c - base);
	return true;
}

static void *
TsdgAtOffset(char *base, Size offset)
{
	return offset == 0 ? NULL : base + offset;
}

/* claims chunks of the run's pages and writes them until none is left */
static void
TsdgWriteClaimedPages(Relation index, TsdgParallelWrite *shared, char *base)
{
	TsdgGraphArrays arrays = {&shared->layout, shared->n, TsdgAtOffset(base, shared->tids),
		TsdgAtOffset(base, shared->rows), TsdgAtOffset(base, shared->neighbors),
		TsdgAtOffset(base, shared->lambdas), TsdgAtOffset(base, shared->knn_ids),
	shared->knn_k};
	TsdgRowRun	run = {&arrays, shared->extent_first, shared->run_first, shared->run_end};

	for (;;)
	{
		uint32		first = pg_atomic_fetch_add_u32(&shared->next, TSDG_PARALLEL_CHUNK_PAGES);

		if (first >= shared->end)
			break;
		if (shared->row_run)
			TsdgWritePages(index, shared->start, first,
						   Min(first + TSDG_PARALLEL_CHUNK_PAGES, shared->end),
						   TsdgFillRowRunPage, &run);
		else
			TsdgWritePages(index, shared->start, first,
						   Min(first + TSDG_PARALLEL_CHUNK_PAGES, shared->end),
						   TsdgFillRegionPage, &arrays);
	}
}

void
TsdgParallelWriteMain(dsm_segment *seg, shm_toc *toc)
{
	TsdgParallelWrite *shared = shm_toc_lookup(toc, TSDG_PARALLEL_WRITE_KEY, false);
	dsm_segment *arrays_seg = dsm_attach(shared->arrays_handle);
	Relation	index;

	if (arrays_seg == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not map the shared memory segment of a tsdg page write")));
	/* the leader's locks are this worker's too (group locking) */
	index = index_open(shared->indexrelid, RowExclusiveLock);
	TsdgWriteClaimedPages(index, shared, dsm_segment_address(arrays_seg));
	index_close(index, RowExclusiveLock);
	dsm_detach(arrays_seg);
}

/*
 * Writes pages [first, end) of the run of blocks from start, as TsdgWritePages
 * with TsdgFillRowRunPage (run not NULL; arrays is run->arrays) or
 * TsdgFillRegionPage (arrays), in parallel when the arrays those pages read
 * lie in arrays_seg and workers are to be had, else in this backend alone.
 */
void
TsdgWritePagesInParallel(Relation index, BlockNumber start, BlockNumber first, BlockNumber end,
						 const TsdgGraphArrays *arrays, const TsdgRowRun *run,
						 dsm_segment *arrays_seg)
{
	char	   *base = arrays_seg != NULL ? dsm_segment_address(arrays_seg) : NULL;
	Size		size = arrays_seg != NULL ? dsm_segment_map_length(arrays_seg) : 0;
	int			workers = end > first ?
		Min(max_parallel_maintenance_workers,
			(int) ((end - first) / tsdg_min_parallel_write_size) - 1) : 0;
	Size		tids,
				rows,
				neighbors,
				lambdas,
				knn_ids;
	ParallelContext *pcxt;
	TsdgParallelWrite *shared;

	/* a row run's pages read the rows and TIDs, a region's the lists */
	if (workers <= 0 || base == NULL || IsInParallelMode() ||
		!TsdgOffsetIn(run != NULL ? arrays->tids : NULL, base, size, &tids) ||
		!TsdgOffsetIn(run != NULL ? arrays->rows : NULL, base, size, &rows) ||
		!TsdgOffsetIn(run == NULL ? arrays->neighbors : NULL, base, size, &neighbors) ||
		!TsdgOffsetIn(run == NULL ? arrays->lambdas : NULL, base, size, &lambdas) ||
		!TsdgOffsetIn(run == NULL ? arrays->knn_ids : NULL, base, size, &knn_ids))
	{
		if (run != NULL)
			TsdgWritePages(index, start, first, end, TsdgFillRowRunPage, (void *) run);
		else
			TsdgWritePages(index, start, first, end, TsdgFillRegionPage, (void *) arrays);
		return;
	}

	EnterParallelMode();
	pcxt = CreateParallelContext("pg_tsdg", "TsdgParallelWriteMain", workers);
	shm_toc_estimate_chunk(&pcxt->estimator, sizeof(TsdgParallelWrite));
	shm_toc_estimate_keys(&pcxt->estimator, 1);
	InitializeParallelDSM(pcxt);
	shared = shm_toc_allocate(pcxt->toc, sizeof(TsdgParallelWrite));
	memset(shared, 0, sizeof(TsdgParallelWrite));
	shared->indexrelid = RelationGetRelid(index);
	shared->arrays_handle = dsm_segment_handle(arrays_seg);
	shared->tids = tids;
	shared->rows = rows;
	shared->neighbors = neighbors;
	shared->lambdas = lambdas;
	shared->knn_ids = knn_ids;
	shared->n = arrays->n;
	shared->knn_k = arrays->knn_k;
	shared->layout = *arrays->layout;
	shared->row_run = run != NULL;
	if (run != NULL)
	{
		shared->extent_first = run->extent_first;
		shared->run_first = run->first;
		shared->run_end = run->end;
	}
	shared->start = start;
	shared->end = end;
	pg_atomic_init_u32(&shared->next, first);
	shm_toc_insert(pcxt->toc, TSDG_PARALLEL_WRITE_KEY, shared);

	LaunchParallelWorkers(pcxt);
	/* this backend writes too, with or without the workers it got */
	TsdgWriteClaimedPages(index, shared, base);
	WaitForParallelWorkersToFinish(pcxt);
	ereport(DEBUG1,
			(errmsg("tsdg index \"%s\": %u %s pages written by this backend and %d parallel workers",
					RelationGetRelationName(index), end - first, run != NULL ? "row" : "list and k-NN",
					pcxt->nworkers_launched)));
	DestroyParallelContext(pcxt);
	ExitParallelMode();
}
