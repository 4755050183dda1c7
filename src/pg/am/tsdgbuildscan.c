/*
 * The heap scan of CREATE INDEX and the arrays it fills: tids[i] and
 * rows[i * dims], sized by the rows the scan will return and grown when it
 * finds more. Within maintenance_work_mem they are local memory, or the
 * segment the GPU worker reads when it builds; past it a NOTICE says so and
 * they go on in temporary files (tsdgspill.c), or to the worker in parts.
 *
 * Parallel workers share the scan of a table whose parallel_workers storage
 * parameter asks for them, as many as the planner then gives
 * (plan_create_index_workers: that parameter within
 * max_parallel_maintenance_workers; PostgreSQL plans workers for btree
 * builds only, so the access method launches them itself). They are not
 * planned for other tables: the participants' rows interleave in the shared
 * arrays, so each participant maps nearly every page of them, which can cost
 * more than the share of the scan it takes (docs/benchmarks.md). They and
 * the session share the table's blocks (a parallel table scan, as nbtree's
 * builds do) and copy the rows straight into one set of shared arrays: the
 * worker's segment, or for a build on the CPU a segment of their own within
 * maintenance_work_mem.
 * Each participant takes a row's place with an atomic counter, so that the
 * arrays hold rows 0 .. n - 1 without gaps, in no particular order (the graph
 * is indifferent to it). The shared arrays are sized by the table's row
 * estimate before the scan and cannot grow while other processes write into
 * them: a row past their end goes to a temporary file of its participant (in
 * a shared file set), and the session adds those rows once the scan is over,
 * growing its arrays as a serial scan would. A table whose estimate already
 * passes the limit, or a column without a type modifier (no row size before
 * the first row), is scanned by the session alone.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am_d.h"
#include "commands/progress.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "storage/buffile.h"
#include "storage/dsm.h"
#include "storage/sharedfileset.h"
#include "storage/shm_toc.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "tsdg.h"
#include "tsdgbuild.h"
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

typedef struct TsdgParallelScan
{
	ParallelContext *pcxt;
	TsdgParallelShared *shared;
	Snapshot	snapshot;
	ItemPointerData *tids;
	float	   *rows;
} TsdgParallelScan;

/* a participant's state during its scan */
typedef struct TsdgScanPart
{
	TsdgParallelShared *shared;
	ItemPointerData *tids;
	float	   *rows;
	float	   *row;			/* one row, converted before it has a place */
	BufFile    *overflow;
	int64		overflow_rows;
	bool		leader;
	int64		seen;
} TsdgScanPart;

PGDLLEXPORT void TsdgParallelScanMain(dsm_segment *seg, shm_toc *toc);
static void TsdgEndParallelScan(TsdgParallelScan *ps);

/*
 * Rows the heap scan will return: the planner's estimate (reltuples scaled to
 * the current size) once the table was vacuumed or analyzed; before that, its
 * pages times the line pointers of its first page; for another table access
 * method, as many rows as fit its pages if the vector were the only column.
 * The arrays grow when the estimate falls short.
 */
static double
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

/* Bytes one row costs during the build: its TID here, the rest in the core's estimate. */
static Size
TsdgBuildBytesPerRow(const TsdgBuildState *bs)
{
	return sizeof(ItemPointerData) + tsdg_build_bytes_per_row(bs->dims, &bs->params);
}

/* the rows whose arrays and graph builder fit maintenance_work_mem, by the estimate above */
static int64
TsdgRowsInMemory(const TsdgBuildState *bs)
{
	return Max((int64) (bs->memory_limit / TsdgBuildBytesPerRow(bs)), 1);
}

/* Past maintenance_work_mem: the NOTICE, and temporary files for the large arrays from here on. */
static void
TsdgPassMemoryLimit(TsdgBuildState *bs)
{
	if (!bs->past_memory_limit)
		ereport(NOTICE,
				(errmsg("tsdg index build no longer fits into maintenance_work_mem after %lld tuples",
						(long long) bs->count),
				 bs->in_parts ?
				 errdetail("The build goes on with its large arrays in temporary files, which may take more time. "
						   "The rows go to the GPU worker in parts through shared memory within maintenance_work_mem; "
						   "the worker's own copy of them is its working memory, which maintenance_work_mem does not bound.") :
				 errdetail("The build goes on with its large arrays in temporary files, which may take more time."),
				 errhint("Increase maintenance_work_mem to speed up builds.")));
	bs->past_memory_limit = true;
	if (bs->spill == NULL)
		bs->spill = TsdgSpillStart();
}

/*
 * Moves the rows loaded so far into arrays for capacity rows: temporary
 * files once the build spills, else local memory. The old arrays, wherever
 * they were (the worker's segment too), are freed.
 */
static void
TsdgMoveRows(TsdgBuildState *bs, int64 capacity)
{
	Size		tid_bytes = sizeof(ItemPointerData) * capacity;
	Size		row_bytes = sizeof(float) * bs->dims * capacity;
	ItemPointerData *tids;
	float	   *rows;

	if (bs->spill == NULL && !bs->use_segment && bs->rows_segment == NULL && bs->tids != NULL)
	{
		bs->tids = repalloc_huge(bs->tids, tid_bytes);
		bs->rows = repalloc_huge(bs->rows, row_bytes);
		bs->capacity = capacity;
		return;
	}
	if (bs->spill != NULL)
	{
		tids = TsdgSpillAlloc(bs->spill, tid_bytes);
		rows = TsdgSpillAlloc(bs->spill, row_bytes);
	}
	else
	{
		tids = MemoryContextAllocHuge(CurrentMemoryContext, tid_bytes);
		rows = MemoryContextAllocHuge(CurrentMemoryContext, row_bytes);
	}
	if (bs->count > 0)
	{
		memcpy(tids, bs->tids, sizeof(ItemPointerData) * bs->count);
		memcpy(rows, bs->rows, sizeof(float) * bs->dims * bs->count);
	}
	if (bs->use_segment)
		TsdgBuildSegmentRelease(&bs->segment);
	else if (bs->rows_segment != NULL)
	{
		dsm_detach(bs->rows_segment);
		bs->rows_segment = NULL;
	}
	else if (bs->rows_in_files)
	{
		TsdgSpillFree(bs->spill, bs->tids);
		TsdgSpillFree(bs->spill, bs->rows);
	}
	else if (bs->tids != NULL)
	{
		pfree(bs->tids);
		pfree(bs->rows);
	}
	bs->use_segment = false;
	bs->rows_in_files = bs->spill != NULL;
	bs->tids = tids;
	bs->rows = rows;
	bs->capacity = capacity;
}

/* the arrays' first capacity: a little more than the estimate, as a table grows between two ANALYZEs */
static int64
TsdgFirstCapacity(const TsdgBuildState *bs)
{
	return (int64) (TsdgEstimateHeapRows(bs->heap, bs->dims) * 1.02) + 1024;
}

static void
TsdgGrowArrays(TsdgBuildState *bs)
{
	int64		max_rows;
	int64		capacity = bs->capacity == 0 ? TsdgFirstCapacity(bs) : bs->capacity * 2;

	/*
	 * The segment within the limit until the rows reach it; past it, in
	 * parts. Only the segment counts: the graph's working memory is the
	 * worker's.
	 */
	max_rows = bs->use_segment ?
		TsdgBuildSegmentRowsWithin(bs->memory_limit, bs->dims, &bs->params, false) : 0;
	if (bs->use_segment && bs->count >= max_rows)
		bs->in_parts = true;
	else if (bs->use_segment)
	{
		bool		ready;

		capacity = Min(capacity, max_rows);
		if (bs->segment.seg == NULL)
			ready = TsdgBuildSegmentCreate(&bs->segment, capacity, bs->dims, &bs->params);
		else
		{
			ready = TsdgBuildSegmentGrow(&bs->segment, bs->count, capacity, bs->dims, &bs->params);
			bs->segment_growths += ready ? 1 : 0;
		}
		if (ready)
		{
			bs->tids = bs->segment.tids;
			bs->rows = bs->segment.rows;
			bs->capacity = capacity;
			return;
		}
		/* no segment large enough (a WARNING said why): the CPU builds */
		if (bs->segment.seg == NULL)
			bs->use_segment = false;
	}

	/* local memory up to the limit, then temporary files */
	max_rows = TsdgRowsInMemory(bs);
	if (bs->spill == NULL && capacity > max_rows)
	{
		if (bs->count < max_rows)
			capacity = max_rows;
		else
			TsdgPassMemoryLimit(bs);
	}
	TsdgMoveRows(bs, capacity);
}

static void
TsdgBuildCallback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
				  bool tupleIsAlive, void *state)
{
	TsdgBuildState *bs = (TsdgBuildState *) state;
	int			dims;

	if (isnull[0])
		return;

	if (bs->dims == 0)
	{
		/* a column without a type modifier: the first row sets the dimensions */
		dims = DatumGetVector(values[0])->dim;
		TsdgCheckDimensions(index, dims);
		bs->dims = dims;
	}
	if (bs->count == bs->capacity)
		TsdgGrowArrays(bs);

	/* straight into the arrays (the worker's segment, when it builds) */
	if (!TsdgCopyVector(values[0], bs->metric, bs->dims, bs->rows + bs->count * bs->dims, &dims))
	{
		if (dims != bs->dims)
			TsdgWrongDimensions(index, dims, bs->dims);
		return;					/* zero vector under cosine */
	}
	bs->tids[bs->count] = *tid;
	bs->count++;

	if (bs->count % 1024 == 0)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, bs->count);
}

/* a row a parallel scan found past the end of its arrays */
static void
TsdgAddOverflowRow(TsdgBuildState *bs, ItemPointer tid, const float *row)
{

	if (bs->count == bs->capacity)
		TsdgGrowArrays(bs);
	memcpy(bs->rows + bs->count * bs->dims, row, sizeof(float) * bs->dims);
	bs->tids[bs->count] = *tid;
	bs->count++;
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
static dsm_segment *
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
static TsdgParallelScan *
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

static int
TsdgParallelScanWorkers(const TsdgParallelScan *ps)
{
	return ps->pcxt->nworkers_launched;
}

/*
 * The session's share of the scan, then the wait for the workers' (whose
 * errors are raised here). Returns the heap tuples the scan saw; *placed:
 * the rows in the arrays, *overflow_rows: those past them.
 */
static double
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

/* adds the rows past the shared arrays' end to bs, participant by participant */
static void
TsdgReadOverflowRows(TsdgParallelScan *ps, TsdgBuildState *bs)
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
			TsdgAddOverflowRow(bs, &tid, row);
		}
		BufFileClose(file);
	}
	pfree(row);
}

/* the workers are done: their files and the parallel context go */
static void
TsdgEndParallelScan(TsdgParallelScan *ps)
{
	WaitForParallelWorkersToFinish(ps->pcxt);
	if (IsMVCCSnapshot(ps->snapshot))
		UnregisterSnapshot(ps->snapshot);
	DestroyParallelContext(ps->pcxt);
	ExitParallelMode();
	pfree(ps);
}

/*
 * The heap scan shared with parallel workers, where it may be (see above).
 * Returns false when it was not; the arrays may be made already.
 */
static bool
TsdgParallelHeapScan(TsdgBuildState *bs, IndexInfo *indexInfo, double *reltuples)
{
	int64		capacity;
	int			nworkers;
	struct dsm_segment *seg;
	TsdgParallelScan *ps;

	if (bs->dims == 0 || RelationGetParallelWorkers(bs->heap, 0) <= 0)
		return false;
	nworkers = plan_create_index_workers(RelationGetRelid(bs->heap), RelationGetRelid(bs->index));
	if (nworkers == 0)
		return false;
	capacity = TsdgFirstCapacity(bs);
	if (bs->use_segment &&
		capacity < TsdgBuildSegmentRowsWithin(bs->memory_limit, bs->dims, &bs->params, false))
		TsdgGrowArrays(bs);
	if (bs->use_segment && bs->segment.seg != NULL)
		seg = bs->segment.seg;
	else if (bs->use_segment || bs->tids != NULL || capacity > TsdgRowsInMemory(bs))
		return false;
	else
	{
		seg = TsdgCreateRowsSegment(capacity, bs->dims, &bs->tids, &bs->rows);
		if (seg == NULL)
			return false;
		bs->rows_segment = seg;
		bs->capacity = capacity;
	}

	ps = TsdgBeginParallelScan(bs->heap, bs->index, indexInfo, nworkers, seg, bs->tids, bs->rows,
							   bs->capacity, bs->dims, bs->metric);
	if (ps == NULL)
		return false;
	bs->parallel_workers = TsdgParallelScanWorkers(ps);
	*reltuples = TsdgRunParallelScan(ps, bs->heap, bs->index, indexInfo, &bs->count,
									 &bs->overflow_rows);
	TsdgReadOverflowRows(ps, bs);
	TsdgEndParallelScan(ps);
	return true;
}

double
TsdgScanHeap(TsdgBuildState *bs, IndexInfo *indexInfo)
{
	double		reltuples;

	if (!TsdgParallelHeapScan(bs, indexInfo, &reltuples))
		reltuples = table_index_build_scan(bs->heap, bs->index, indexInfo, true, true,
										   TsdgBuildCallback, bs, NULL);
	return reltuples;
}
