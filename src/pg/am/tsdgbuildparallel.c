/*
 * The heap scan of CREATE INDEX shared with parallel workers, for a table
 * whose parallel_workers storage parameter asks for them (tsdgbuildscan.c
 * says when). The workers and the session share the table's blocks (a
 * parallel table scan, as nbtree's builds do) and copy the rows straight
 * into one set of shared arrays: the worker's segment, or for a build on the
 * CPU a segment of their own within maintenance_work_mem. Under
 * parallel_leader_participation = off the session only waits for the
 * workers, as nbtree's builds do; it scans alone when none could be launched.
 *
 * Each participant claims the arrays' places a chunk at a time from an
 * atomic counter and fills its chunk before it claims the next, so that the
 * participants write, and fault in, pages of their own, and meet at the
 * counter once a chunk rather than once a row. A place is taken only for a
 * row that has one, so every chunk is full but each participant's last,
 * which may end in empty places. Once the scan is over the session fills
 * the empty places below the row count with the rows above it, so that the
 * arrays hold rows 0 .. n - 1 without gaps, as a serial scan leaves them, in
 * no particular order (the graph is indifferent to it).
 *
 * The shared arrays are sized by the table's row estimate before the scan
 * and cannot grow while other processes write into them: a participant
 * whose claim lies past their end writes its rows to a temporary file of its
 * own (in a shared file set), and the session adds those rows once the scan
 * is over, growing its arrays as a serial scan would.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
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
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "tsdg.h"
#include "tsdgbuild.h"
#include "tsdgworkerclient.h"

#define TSDG_PARALLEL_SCAN_KEY	UINT64CONST(0x5453444702)
#define TSDG_PARALLEL_QUERY_KEY	UINT64CONST(0x5453444703)
#define TSDG_PARALLEL_REPORTS_KEY	UINT64CONST(0x5453444704)

/*
 * The places a participant claims at once: pages of rows enough that two
 * participants seldom share one, few enough that the empty places of the
 * last chunks, moved after the scan, cost nothing to speak of.
 */
#define TSDG_CHUNK_ROWS 1024

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
	pg_atomic_uint64 next_chunk;	/* the next chunk's first place; past capacity: files */

	/* the rows past the arrays' end, a file per participant */
	SharedFileSet overflow_files;

	/* what the participants report when done, under mutex */
	slock_t		mutex;
	double		reltuples;
	int64		overflow_rows;
} TsdgParallelShared;

#define TsdgParallelTableScan(shared) \
	((ParallelTableScanDesc) ((char *) (shared) + BUFFERALIGN(sizeof(TsdgParallelShared))))

/*
 * A participant's rows in the arrays and the empty places its last chunk
 * ends in (hole_start .. hole_end - 1), in the parallel context's segment:
 * the session's first, then a worker's by its ParallelWorkerNumber.
 */
typedef struct TsdgScanReport
{
	int64		placed;
	int64		hole_start;
	int64		hole_end;
} TsdgScanReport;

typedef struct TsdgParallelScan
{
	ParallelContext *pcxt;
	TsdgParallelShared *shared;
	TsdgScanReport *reports;
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
	int64		next;			/* the next place of its chunk */
	int64		chunk_end;
	bool		past_arrays;	/* its last claim lay past the arrays: the rest to its file */
	int64		placed;
	BufFile    *overflow;
	int64		overflow_rows;
	bool		leader;
	int64		seen;
} TsdgScanPart;

PGDLLEXPORT void TsdgParallelScanMain(dsm_segment *seg, shm_toc *toc);
static void TsdgEndParallelScan(TsdgParallelScan *ps);

/* the file of participant number (0 the session, 1 .. the workers) */
static void
TsdgOverflowFileName(char *name, int number)
{
	snprintf(name, MAXPGPATH, "tsdg-rows-%d", number);
}

/* the next place of part's chunk, claiming a chunk when it is full; false past the arrays */
static bool
TsdgTakePlace(TsdgScanPart *part, int64 *place)
{
	TsdgParallelShared *shared = part->shared;

	if (part->next == part->chunk_end)
	{
		int64		start;

		if (part->past_arrays)
			return false;
		start = (int64) pg_atomic_fetch_add_u64(&shared->next_chunk, TSDG_CHUNK_ROWS);
		if (start >= shared->capacity)
		{
			part->past_arrays = true;
			return false;
		}
		part->next = start;
		part->chunk_end = Min(start + TSDG_CHUNK_ROWS, shared->capacity);
	}
	*place = part->next++;
	part->placed++;
	return true;
}

static void
TsdgParallelCallback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
					 bool tupleIsAlive, void *state)
{
	TsdgScanPart *part = (TsdgScanPart *) state;
	TsdgParallelShared *shared = part->shared;
	int			dims;
	int64		place;

	if (isnull[0])
		return;
	if (!TsdgCopyVector(values[0], shared->metric, shared->dims, part->row, &dims))
	{
		if (dims != shared->dims)
			TsdgWrongDimensions(index, dims, shared->dims);
		return;					/* zero vector under cosine */
	}

	if (TsdgTakePlace(part, &place))
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
									 Min((int64) pg_atomic_read_u64(&shared->next_chunk),
										 shared->capacity));
}

/* one participant's share of the scan, in the session or a worker */
static void
TsdgScanShare(TsdgParallelShared *shared, TsdgScanReport *reports, Relation heap, Relation index,
			  IndexInfo *indexInfo, ItemPointerData *tids, float *rows, bool leader)
{
	TsdgScanPart part;
	TsdgScanReport *report = &reports[ParallelWorkerNumber + 1];
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
	report->placed = part.placed;
	report->hole_start = part.next;
	report->hole_end = part.chunk_end;
	SpinLockRelease(&shared->mutex);
}

void
TsdgParallelScanMain(dsm_segment *seg, shm_toc *toc)
{
	TsdgParallelShared *shared = shm_toc_lookup(toc, TSDG_PARALLEL_SCAN_KEY, false);
	TsdgScanReport *reports = shm_toc_lookup(toc, TSDG_PARALLEL_REPORTS_KEY, false);
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

	TsdgScanShare(shared, reports, heap, index, indexInfo,
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
	Size		report_bytes = mul_size(sizeof(TsdgScanReport), nworkers + 1);
	Size		query_bytes = debug_query_string ? strlen(debug_query_string) + 1 : 0;
	char	   *base = dsm_segment_address(rows_segment);

	EnterParallelMode();
	pcxt = CreateParallelContext("pg_tsdg", "TsdgParallelScanMain", nworkers);

	/* as nbtree: every tuple for a plain build, an MVCC snapshot for CONCURRENTLY */
	snapshot = indexInfo->ii_Concurrent ? RegisterSnapshot(GetTransactionSnapshot()) : SnapshotAny;
	shared_bytes = add_size(BUFFERALIGN(sizeof(TsdgParallelShared)),
							table_parallelscan_estimate(heap, snapshot));
	shm_toc_estimate_chunk(&pcxt->estimator, shared_bytes);
	shm_toc_estimate_chunk(&pcxt->estimator, report_bytes);
	shm_toc_estimate_keys(&pcxt->estimator, 2);
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
	pg_atomic_init_u64(&shared->next_chunk, 0);
	PrepareTempTablespaces();
	SharedFileSetInit(&shared->overflow_files, pcxt->seg);
	SpinLockInit(&shared->mutex);
	table_parallelscan_initialize(heap, TsdgParallelTableScan(shared), snapshot);
	shm_toc_insert(pcxt->toc, TSDG_PARALLEL_SCAN_KEY, shared);
	ps = palloc0(sizeof(TsdgParallelScan));
	ps->reports = shm_toc_allocate(pcxt->toc, report_bytes);
	MemSet(ps->reports, 0, report_bytes);
	shm_toc_insert(pcxt->toc, TSDG_PARALLEL_REPORTS_KEY, ps->reports);
	if (query_bytes > 0)
	{
		char	   *query = shm_toc_allocate(pcxt->toc, query_bytes);

		memcpy(query, debug_query_string, query_bytes);
		shm_toc_insert(pcxt->toc, TSDG_PARALLEL_QUERY_KEY, query);
	}

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
TsdgCompareHoles(const void *a, const void *b)
{
	int64		start_a = ((const TsdgScanReport *) a)->hole_start;
	int64		start_b = ((const TsdgScanReport *) b)->hole_start;

	return start_a < start_b ? -1 : start_a > start_b ? 1 : 0;
}

/*
 * Fills the empty places below count, which only the participants' last
 * chunks leave (reports), with the rows above count, taken from the top
 * (top: the end of the places claimed) down. Returns the rows moved.
 */
static int64
TsdgFillChunkHoles(const TsdgScanReport *reports, int nreports, int64 count, int64 top,
				   ItemPointerData *tids, float *rows, int dims)
{
	TsdgScanReport *holes = palloc(sizeof(TsdgScanReport) * nreports);
	int			nholes = 0;
	int			above;			/* the holes not yet passed from the top down: 0 .. above - 1 */
	int64		from = top - 1;
	int64		moved = 0;

	for (int i = 0; i < nreports; i++)
		if (reports[i].hole_start < reports[i].hole_end)
			holes[nholes++] = reports[i];
	qsort(holes, nholes, sizeof(TsdgScanReport), TsdgCompareHoles);
	above = nholes;

	for (int h = 0; h < nholes && holes[h].hole_start < count; h++)
	{
		for (int64 to = holes[h].hole_start; to < Min(holes[h].hole_end, count); to++)
		{
			/* the highest place that holds a row */
			while (above > 0 && holes[above - 1].hole_end > from)
			{
				if (holes[above - 1].hole_start <= from)
					from = holes[above - 1].hole_start - 1;
				above--;
			}
			Assert(from >= count);
			tids[to] = tids[from];
			memcpy(rows + to * dims, rows + from * dims, sizeof(float) * dims);
			from--;
			moved++;
		}
	}
	pfree(holes);
	return moved;
}

/*
 * The session's share of the scan, unless parallel_leader_participation is
 * off, then the wait for the workers' (whose errors are raised here), and
 * the arrays made dense. Fills bs's count, overflow_rows, rows_placed and
 * rows_moved; returns the heap tuples the scan saw.
 */
static double
TsdgRunParallelScan(TsdgParallelScan *ps, TsdgBuildState *bs, IndexInfo *indexInfo)
{
	TsdgParallelShared *shared = ps->shared;
	int			nreports = ps->pcxt->nworkers_launched + 1;

	if (parallel_leader_participation)
		TsdgScanShare(shared, ps->reports, bs->heap, bs->index, indexInfo, ps->tids, ps->rows,
					  true);
	WaitForParallelWorkersToFinish(ps->pcxt);

	bs->count = 0;
	bs->rows_placed = palloc(sizeof(int64) * nreports);
	for (int i = 0; i < nreports; i++)
	{
		bs->rows_placed[i] = ps->reports[i].placed;
		bs->count += ps->reports[i].placed;
	}
	bs->rows_moved = TsdgFillChunkHoles(ps->reports, nreports, bs->count,
										Min((int64) pg_atomic_read_u64(&shared->next_chunk),
											shared->capacity),
										ps->tids, ps->rows, shared->dims);
	bs->overflow_rows = shared->overflow_rows;
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
			TsdgAddRow(bs, &tid, row);
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

bool
TsdgParallelHeapScan(TsdgBuildState *bs, IndexInfo *indexInfo, int nworkers, double *reltuples)
{
	int64		capacity = TsdgFirstCapacity(bs);
	struct dsm_segment *seg;
	TsdgParallelScan *ps;

	if (bs->use_segment &&
		capacity < TsdgBuildSegmentRowsWithin(bs->memory_limit, bs->dims, &bs->params, 0))
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
	bs->parallel_workers = ps->pcxt->nworkers_launched;
	*reltuples = TsdgRunParallelScan(ps, bs, indexInfo);
	TsdgReadOverflowRows(ps, bs);
	TsdgEndParallelScan(ps);
	return true;
}
