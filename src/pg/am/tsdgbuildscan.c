/*
 * The heap scan of CREATE INDEX: the rows it will return, which size the
 * arrays it fills, and the scan shared with parallel workers.
 *
 * Parallel workers and the session share the table's blocks (a parallel
 * table scan, as nbtree's builds do) and copy the rows straight into one set
 * of shared arrays: the GPU worker's build segment, or a segment of their own
 * for a build on the CPU. PostgreSQL plans workers for btree builds only, so
 * the access method launches them itself, as many as
 * plan_create_index_workers allows (max_parallel_maintenance_workers, the
 * table's parallel_workers).
 *
 * Each participant takes a row's place with an atomic counter, so that the
 * arrays hold rows 0 .. n - 1 without gaps, in no particular order (the graph
 * is indifferent to it). The arrays are sized by the table's row estimate
 * before the scan and cannot grow while other processes write into them: a
 * row past their end goes to a temporary file of its participant (in a
 * shared file set), and the session adds those rows once the scan is over,
 * growing its arrays as a serial build would.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am_d.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/buffile.h"
#include "storage/dsm.h"
#include "storage/sharedfileset.h"
#include "storage/shm_toc.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/snapmgr.h"

#include "tsdg.h"
#include "tsdgworkerclient.h"
#include "vector.h"

#define TSDG_PARALLEL_SCAN_KEY	UINT64CONST(0x5453444702)
#define TSDG_PARALLEL_QUERY_KEY	UINT64CONST(0x5453444703)

/* in the parallel context's segment, followed by the parallel table scan */
typedef struct TsdgParallelShared
{
	Oid			heap_oid;
	Oid			index_oid;
	bool		concurrent;
	TsdgMetric	metric;
	int			dims;

	/* the arrays, in the segment rows_segment: capacity rows */
	dsm_handle	rows_segment;
	Size		tids_offset;
	Size		rows_offset;
	int64		capacity;
	pg_atomic_uint64 next_row;	/* the next row's place; past capacity: a file */

	/* the rows past the arrays' end, a file per participant */
	SharedFileSet overflow_files;

	/* what the participants report when done, under mutex */
	slock_t		mutex;
	double		reltuples;
	int64		overflow_rows;
} TsdgParallelShared;

#define TsdgParallelTableScan(shared) \
	((ParallelTableScanDesc) ((char *) (shared) + BUFFERALIGN(sizeof(TsdgParallelShared))))

struct TsdgParallelScan
{
	ParallelContext *pcxt;
	TsdgParallelShared *shared;
	Snapshot	snapshot;
	ItemPointerData *tids;
	float	   *rows;
};

/* a participant's state during its scan */
typedef struct TsdgScanPart
{
	TsdgParallelShared *shared;
	Relation	index;
	ItemPointerData *tids;
	float	   *rows;
	float	   *row;			/* one row, converted before it has a place */
	BufFile    *overflow;
	int64		overflow_rows;
	bool		leader;
	int64		seen;
} TsdgScanPart;

PGDLLEXPORT void TsdgParallelScanMain(dsm_segment *seg, shm_toc *toc);

/*
 * Rows the heap scan will return: the planner's estimate (reltuples scaled to
 * the current size) once the table was vacuumed or analyzed; before that, its
 * pages times the line pointers of its first page; for another table access
 * method, as many rows as fit its pages if the vector were the only column.
 * The arrays grow when the estimate falls short.
 */
double
TsdgEstimateHeapRows(Relation heap, int dims)
{
	BlockNumber pages = RelationGetNumberOfBlocks(heap);
	Size		tuple_bytes;

	if (heap->rd_rel->reltuples >= 0 && heap->rd_rel->relpages > 0)
		return heap->rd_rel->reltuples / heap->rd_rel->relpages * pages;
	if (pages > 0 && heap->rd_rel->relam == HEAP_TABLE_AM_OID)
	{
		Buffer		buf = ReadBuffer(heap, 0);
		OffsetNumber line_pointers;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		line_pointers = PageGetMaxOffsetNumber(BufferGetPage(buf));
		UnlockReleaseBuffer(buf);
		if (line_pointers > 0)
			return (double) pages * line_pointers;
	}
	tuple_bytes = MAXALIGN(SizeofHeapTupleHeader) + MAXALIGN(VECTOR_SIZE(dims)) +
		sizeof(ItemIdData);
	return (double) pages * ((BLCKSZ - SizeOfPageHeaderData) / tuple_bytes);
}

/* the file of participant number (0 the session, 1 .. the workers) */
static void
TsdgOverflowFileName(char *name, int number)
{
	snprintf(name, MAXPGPATH, "tsdg-rows-%d", number);
}

static void
TsdgParallelCallback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
					 bool tupleIsAlive, void *state)
{
	TsdgScanPart *part = (TsdgScanPart *) state;
	TsdgParallelShared *shared = part->shared;
	int			dims;
	uint64		place;

	if (isnull[0])
		return;
	if (!TsdgCopyVector(values[0], shared->metric, shared->dims, part->row, &dims))
	{
		if (dims != shared->dims)
			TsdgWrongDimensions(index, dims, shared->dims);
		return;					/* zero vector under cosine */
	}

	/* a place only for a row that has one, so that no place is left empty */
	place = pg_atomic_fetch_add_u64(&shared->next_row, 1);
	if (place < (uint64) shared->capacity)
	{
		memcpy(part->rows + place * shared->dims, part->row, sizeof(float) * shared->dims);
		part->tids[place] = *tid;
	}
	else
	{
		if (part->overflow == NULL)
		{
			char		name[MAXPGPATH];

			TsdgOverflowFileName(name, ParallelWorkerNumber + 1);
			part->overflow = BufFileCreateFileSet(&shared->overflow_files.fs, name);
		}
		BufFileWrite(part->overflow, tid, sizeof(ItemPointerData));
		BufFileWrite(part->overflow, part->row, sizeof(float) * shared->dims);
		part->overflow_rows++;
	}

	if (part->leader && ++part->seen % 1024 == 0)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE,
									 (int64) pg_atomic_read_u64(&shared->next_row));
}

/* one participant's share of the scan, in the session or a worker */
static void
TsdgScanShare(TsdgParallelShared *shared, Relation heap, Relation index, IndexInfo *indexInfo,
			  ItemPointerData *tids, float *rows, bool leader)
{
	TsdgScanPart part;
	TableScanDesc scan;
	double		reltuples;

	MemSet(&part, 0, sizeof(part));
	part.shared = shared;
	part.index = index;
	part.tids = tids;
	part.rows = rows;
	part.row = palloc(sizeof(float) * shared->dims);
	part.leader = leader;

	scan = table_beginscan_parallel(heap, TsdgParallelTableScan(shared));
	reltuples = table_index_build_scan(heap, index, indexInfo, true, leader,
									   TsdgParallelCallback, &part, scan);
	if (part.overflow != NULL)
		BufFileClose(part.overflow);
	pfree(part.row);

	SpinLockAcquire(&shared->mutex);
	shared->reltuples += reltuples;
	shared->overflow_rows += part.overflow_rows;
	SpinLockRelease(&shared->mutex);
}

void
TsdgParallelScanMain(dsm_segment *seg, shm_toc *toc)
{
	TsdgParallelShared *shared = shm_toc_lookup(toc, TSDG_PARALLEL_SCAN_KEY, false);
	/* the locks CREATE INDEX holds, which the session's lock group already has */
	LOCKMODE	heap_lock = shared->concurrent ? ShareUpdateExclusiveLock : ShareLock;
	LOCKMODE	index_lock = shared->concurrent ? RowExclusiveLock : AccessExclusiveLock;
	Relation	heap;
	Relation	index;
	IndexInfo  *indexInfo;
	dsm_segment *rows_segment;
	char	   *base;

	debug_query_string = shm_toc_lookup(toc, TSDG_PARALLEL_QUERY_KEY, true);
	pgstat_report_activity(STATE_RUNNING, debug_query_string);

	heap = table_open(shared->heap_oid, heap_lock);
	index = index_open(shared->index_oid, index_lock);
	rows_segment = dsm_attach(shared->rows_segment);
	if (rows_segment == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not map the shared memory segment of a tsdg index build")));
	SharedFileSetAttach(&shared->overflow_files, seg);
	indexInfo = BuildIndexInfo(index);
	indexInfo->ii_Concurrent = shared->concurrent;
	base = dsm_segment_address(rows_segment);

	TsdgScanShare(shared, heap, index, indexInfo,
				  (ItemPointerData *) (base + shared->tids_offset),
				  (float *) (base + shared->rows_offset), false);

	dsm_detach(rows_segment);
	index_close(index, index_lock);
	table_close(heap, heap_lock);
}

/*
 * A segment for the arrays of capacity rows of a build on the CPU, or NULL
 * when none can be had (the build then scans alone into local memory).
 */
dsm_segment *
TsdgCreateRowsSegment(int64 capacity, int dims, ItemPointerData **tids, float **rows)
{
	Size		tid_bytes = MAXALIGN(sizeof(ItemPointerData) * (Size) capacity);
	dsm_segment *seg = TsdgTryCreateSegment(tid_bytes + sizeof(float) * dims * (Size) capacity,
											NULL);

	if (seg == NULL)
		return NULL;
	*tids = dsm_segment_address(seg);
	*rows = (float *) ((char *) *tids + tid_bytes);
	return seg;
}

/*
 * Launches up to nworkers workers to scan heap into the arrays tids and rows
 * (capacity rows) of segment rows_segment. NULL when none could be launched:
 * the caller scans alone.
 */
TsdgParallelScan *
TsdgBeginParallelScan(Relation heap, Relation index, IndexInfo *indexInfo, int nworkers,
					  dsm_segment *rows_segment, ItemPointerData *tids, float *rows,
					  int64 capacity, int dims, TsdgMetric metric)
{
	TsdgParallelScan *ps;
	TsdgParallelShared *shared;
	ParallelContext *pcxt;
	Snapshot	snapshot;
	Size		shared_bytes;
	Size		query_bytes = debug_query_string ? strlen(debug_query_string) + 1 : 0;
	char	   *base = dsm_segment_address(rows_segment);

	EnterParallelMode();
	pcxt = CreateParallelContext("pg_tsdg", "TsdgParallelScanMain", nworkers);

	/* as nbtree: every tuple for a plain build, an MVCC snapshot for CONCURRENTLY */
	snapshot = indexInfo->ii_Concurrent ? RegisterSnapshot(GetTransactionSnapshot()) : SnapshotAny;
	shared_bytes = add_size(BUFFERALIGN(sizeof(TsdgParallelShared)),
							table_parallelscan_estimate(heap, snapshot));
	shm_toc_estimate_chunk(&pcxt->estimator, shared_bytes);
	shm_toc_estimate_keys(&pcxt->estimator, 1);
	if (query_bytes > 0)
	{
		shm_toc_estimate_chunk(&pcxt->estimator, query_bytes);
		shm_toc_estimate_keys(&pcxt->estimator, 1);
	}
	InitializeParallelDSM(pcxt);
	if (pcxt->seg == NULL)
	{
		if (IsMVCCSnapshot(snapshot))
			UnregisterSnapshot(snapshot);
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		return NULL;
	}

	shared = shm_toc_allocate(pcxt->toc, shared_bytes);
	MemSet(shared, 0, sizeof(TsdgParallelShared));
	shared->heap_oid = RelationGetRelid(heap);
	shared->index_oid = RelationGetRelid(index);
	shared->concurrent = indexInfo->ii_Concurrent;
	shared->metric = metric;
	shared->dims = dims;
	shared->rows_segment = dsm_segment_handle(rows_segment);
	shared->tids_offset = (char *) tids - base;
	shared->rows_offset = (char *) rows - base;
	shared->capacity = capacity;
	pg_atomic_init_u64(&shared->next_row, 0);
	PrepareTempTablespaces();
	SharedFileSetInit(&shared->overflow_files, pcxt->seg);
	SpinLockInit(&shared->mutex);
	table_parallelscan_initialize(heap, TsdgParallelTableScan(shared), snapshot);
	shm_toc_insert(pcxt->toc, TSDG_PARALLEL_SCAN_KEY, shared);
	if (query_bytes > 0)
	{
		char	   *query = shm_toc_allocate(pcxt->toc, query_bytes);

		memcpy(query, debug_query_string, query_bytes);
		shm_toc_insert(pcxt->toc, TSDG_PARALLEL_QUERY_KEY, query);
	}

	ps = palloc0(sizeof(TsdgParallelScan));
	ps->pcxt = pcxt;
	ps->shared = shared;
	ps->snapshot = snapshot;
	ps->tids = tids;
	ps->rows = rows;

	LaunchParallelWorkers(pcxt);
	if (pcxt->nworkers_launched == 0)
	{
		TsdgEndParallelScan(ps);
		return NULL;
	}
	return ps;
}

int
TsdgParallelScanWorkers(const TsdgParallelScan *ps)
{
	return ps->pcxt->nworkers_launched;
}

/*
 * The session's share of the scan, then the wait for the workers' (whose
 * errors are raised here). Returns the heap tuples the scan saw; *placed:
 * the rows in the arrays, *overflow_rows: those past them.
 */
double
TsdgRunParallelScan(TsdgParallelScan *ps, Relation heap, Relation index, IndexInfo *indexInfo,
					int64 *placed, int64 *overflow_rows)
{
	TsdgParallelShared *shared = ps->shared;

	TsdgScanShare(shared, heap, index, indexInfo, ps->tids, ps->rows, true);
	WaitForParallelWorkersToFinish(ps->pcxt);
	*placed = Min((int64) pg_atomic_read_u64(&shared->next_row), shared->capacity);
	*overflow_rows = shared->overflow_rows;
	return shared->reltuples;
}

/* hands each row past the arrays' end to add, participant by participant */
void
TsdgReadOverflowRows(TsdgParallelScan *ps, TsdgOverflowRowFn add, void *arg)
{
	TsdgParallelShared *shared = ps->shared;
	Size		row_bytes = sizeof(float) * shared->dims;
	ItemPointerData tid;
	float	   *row;

	if (shared->overflow_rows == 0)
		return;
	row = palloc(row_bytes);
	for (int number = 0; number <= ps->pcxt->nworkers_launched; number++)
	{
		char		name[MAXPGPATH];
		BufFile    *file;

		TsdgOverflowFileName(name, number);
		file = BufFileOpenFileSet(&shared->overflow_files.fs, name, O_RDONLY, true);
		if (file == NULL)
			continue;
		while (BufFileRead(file, &tid, sizeof(tid)) == sizeof(tid))
		{
			if (BufFileRead(file, row, row_bytes) != row_bytes)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read a row of a tsdg index build from temporary file \"%s\"",
								name)));
			CHECK_FOR_INTERRUPTS();
			add(arg, &tid, row);
		}
		BufFileClose(file);
	}
	pfree(row);
}

/* the workers are done: their files and the parallel context go */
void
TsdgEndParallelScan(TsdgParallelScan *ps)
{
	WaitForParallelWorkersToFinish(ps->pcxt);
	if (IsMVCCSnapshot(ps->snapshot))
		UnregisterSnapshot(ps->snapshot);
	DestroyParallelContext(ps->pcxt);
	ExitParallelMode();
	pfree(ps);
}
