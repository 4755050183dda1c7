/*
 * Parallel writers of a worker merge's list pages: run in the session that
 * merges and in the parallel workers it launches.
 *
 * The GPU worker publishes a merge's search lists in row order while it
 * writes the rest of them out and links the graph's components
 * (TSDG_PHASE_LINK); the CPU worker publishes them all with its answer. One
 * backend writing them alone, WAL-bound, finishes well after the GPU
 * worker's answer. So parallel workers (max_parallel_maintenance_workers of
 * them, as for CREATE INDEX) and the session share the pages, 32 at a time
 * (one WAL record of page images), in order, each claim written once the
 * worker has published the lists of its last page. The workers wait for lists; the session writes
 * what is ready whenever it polls the worker, and the rest at the answer.
 * Past a few writers the WAL insertion, not the writers, sets the pace.
 * Without workers (none configured or free, a temporary index, or the merge
 * runs in a parallel worker or in autovacuum, which launches none) the
 * session writes them all the same way.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "postmaster/autovacuum.h"
#include "storage/dsm.h"
#include "storage/shm_toc.h"
#include "utils/snapmgr.h"

#include "tsdg.h"
#include "tsdgipc.h"

#define TSDG_LIST_WRITERS_KEY	UINT64CONST(0x5453444701)
/* pages per claim: those of one WAL record (TsdgWritePages) */
#define TSDG_PAGES_PER_CLAIM	XLR_MAX_BLOCK_ID

/* in the parallel context's segment */
typedef struct TsdgListWritersShared
{
	Oid			index_oid;
	dsm_handle	merge_segment;
	/* the arrays' offsets in the merge segment */
	Size		neighbors;
	Size		lambdas;
	Size		summary;
	TsdgLayout	layout;
	int64		n;
	BlockNumber list_start;
	BlockNumber pages;
	pg_atomic_uint32 next_claim;	/* claim c: pages [c, c + 1) * TSDG_PAGES_PER_CLAIM */
	pg_atomic_uint32 pages_written;
	pg_atomic_uint32 lists;		/* TsdgListsState */
} TsdgListWritersShared;

typedef enum TsdgListsState
{
	TSDG_LISTS_COMING,			/* as lists_ready counts them */
	TSDG_LISTS_ALL,				/* the worker answered: every list is there */
	TSDG_LISTS_NONE				/* the merge failed: no list is this merge's */
} TsdgListsState;

struct TsdgListWriters
{
	Relation	index;
	ParallelContext *pcxt;		/* NULL: the session writes alone */
	TsdgListWritersShared *shared;
	TsdgGraphArrays arrays;
	const pg_atomic_uint64 *lists_ready;
	bool		pushed_snapshot;
	instr_time	started;
};

PGDLLEXPORT void TsdgListWriterMain(dsm_segment *seg, shm_toc *toc);

/*
 * Writes the claims whose lists are ready, in order: with wait, every claim,
 * waiting for its lists (unless the merge failed); without, up to the first
 * not ready.
 */
static void
TsdgWriteClaims(Relation index, TsdgListWritersShared *shared, const TsdgGraphArrays *arrays,
				const pg_atomic_uint64 *lists_ready, bool wait)
{
	for (;;)
	{
		uint32		claim = pg_atomic_read_u32(&shared->next_claim);
		BlockNumber first = claim * TSDG_PAGES_PER_CLAIM;
		BlockNumber end;
		int64		needed;

		if (first >= shared->pages)
			return;
		end = Min(first + TSDG_PAGES_PER_CLAIM, shared->pages);
		needed = Min((int64) end * shared->layout.lists_per_page, shared->n);
		while ((int64) pg_atomic_read_u64((pg_atomic_uint64 *) lists_ready) < needed &&
			   pg_atomic_read_u32(&shared->lists) != TSDG_LISTS_ALL)
		{
			if (!wait || pg_atomic_read_u32(&shared->lists) == TSDG_LISTS_NONE)
				return;
			pg_usleep(200L);
			CHECK_FOR_INTERRUPTS();
		}
		/* the lists counted ready are read after the count */
		pg_read_barrier();
		if (!pg_atomic_compare_exchange_u32(&shared->next_claim, &claim, claim + 1))
			continue;
		TsdgWritePages(index, shared->list_start, first, end, TsdgFillRegionPage, (void *) arrays);
		pg_atomic_fetch_add_u32(&shared->pages_written, end - first);
	}
}

void
TsdgListWriterMain(dsm_segment *seg, shm_toc *toc)
{
	TsdgListWritersShared *shared = shm_toc_lookup(toc, TSDG_LIST_WRITERS_KEY, false);
	Relation	index = index_open(shared->index_oid, RowExclusiveLock);
	dsm_segment *merge = dsm_attach(shared->merge_segment);
	char	   *base;
	TsdgGraphArrays arrays;

	if (merge == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not map the shared memory segment of a tsdg merge")));
	base = dsm_segment_address(merge);
	memset(&arrays, 0, sizeof(arrays));
	arrays.layout = &shared->layout;
	arrays.n = shared->n;
	arrays.neighbors = (const uint32 *) (base + shared->neighbors);
	arrays.lambdas = (const uint8 *) (base + shared->lambdas);
	TsdgWriteClaims(index, shared, &arrays,
					&((TsdgBuildSummary *) (base + shared->summary))->lists_ready, true);
	dsm_detach(merge);
	index_close(index, RowExclusiveLock);
}

TsdgListWriters *
TsdgStartListWriters(Relation index, dsm_segment *merge, const TsdgGraphArrays *arrays,
					 const TsdgBuildSummary *summary, BlockNumber list_start)
{
	TsdgListWriters *w = palloc0(sizeof(TsdgListWriters));
	char	   *base = dsm_segment_address(merge);
	/* another backend cannot write a temporary index's buffers */
	int			nworkers = IsInParallelMode() || IsAutoVacuumWorkerProcess() ||
		RelationUsesLocalBuffers(index) ? 0 : max_parallel_maintenance_workers;
	TsdgListWritersShared *shared;

	w->index = index;
	w->arrays = *arrays;
	w->lists_ready = &summary->lists_ready;
	INSTR_TIME_SET_CURRENT(w->started);
	if (nworkers > 0)
	{
		/* the parallel context copies the active snapshot, which VACUUM has not set */
		if (!ActiveSnapshotSet())
		{
			PushActiveSnapshot(GetTransactionSnapshot());
			w->pushed_snapshot = true;
		}
		EnterParallelMode();
		w->pcxt = CreateParallelContext("pg_tsdg", "TsdgListWriterMain", nworkers);
		shm_toc_estimate_chunk(&w->pcxt->estimator, sizeof(TsdgListWritersShared));
		shm_toc_estimate_keys(&w->pcxt->estimator, 1);
		InitializeParallelDSM(w->pcxt);
		shared = shm_toc_allocate(w->pcxt->toc, sizeof(TsdgListWritersShared));
	}
	else
		shared = palloc(sizeof(TsdgListWritersShared));

	shared->index_oid = RelationGetRelid(index);
	shared->merge_segment = dsm_segment_handle(merge);
	shared->neighbors = (char *) arrays->neighbors - base;
	shared->lambdas = (char *) arrays->lambdas - base;
	shared->summary = (char *) summary - base;
	shared->layout = *arrays->layout;
	shared->n = arrays->n;
	shared->list_start = list_start;
	shared->pages = TsdgPagesFor(arrays->n, arrays->layout->lists_per_page);
	pg_atomic_init_u32(&shared->next_claim, 0);
	pg_atomic_init_u32(&shared->pages_written, 0);
	pg_atomic_init_u32(&shared->lists, TSDG_LISTS_COMING);
	w->shared = shared;
	w->arrays.layout = &shared->layout;

	if (w->pcxt != NULL)
	{
		shm_toc_insert(w->pcxt->toc, TSDG_LIST_WRITERS_KEY, shared);
		LaunchParallelWorkers(w->pcxt);
	}
	return w;
}

void
TsdgListWritersOffer(TsdgListWriters *w)
{
	TsdgWriteClaims(w->index, w->shared, &w->arrays, w->lists_ready, false);
}

int
TsdgListWritersLaunched(const TsdgListWriters *w)
{
	return w->pcxt != NULL ? w->pcxt->nworkers_launched : 0;
}

BlockNumber
TsdgFinishListWriters(TsdgListWriters *w, bool complete, BlockNumber *before, double *seconds)
{
	BlockNumber pages = w->shared->pages;
	BlockNumber written;
	instr_time	end;

	*before = pg_atomic_read_u32(&w->shared->pages_written);
	(void) pg_atomic_exchange_u32(&w->shared->lists, complete ? TSDG_LISTS_ALL : TSDG_LISTS_NONE);
	if (complete)
		TsdgWriteClaims(w->index, w->shared, &w->arrays, w->lists_ready, true);
	if (w->pcxt != NULL)
	{
		WaitForParallelWorkersToFinish(w->pcxt);
		written = pg_atomic_read_u32(&w->shared->pages_written);
		DestroyParallelContext(w->pcxt);
		ExitParallelMode();
		if (w->pushed_snapshot)
			PopActiveSnapshot();
	}
	else
	{
		written = pg_atomic_read_u32(&w->shared->pages_written);
		pfree(w->shared);
	}
	INSTR_TIME_SET_CURRENT(end);
	INSTR_TIME_SUBTRACT(end, w->started);
	*seconds = INSTR_TIME_GET_DOUBLE(end);
	pfree(w);
	if (complete && written != pages)
		elog(ERROR, "tsdg list writers wrote %u list pages of %u", written, pages);
	return written;
}
