/*
 * The heap scan of CREATE INDEX and the arrays it fills: tids[i] and
 * rows[i * dims], sized by the rows the scan will return and grown when it
 * finds more. Within maintenance_work_mem they are local memory, or the
 * segment the GPU worker reads when it builds; past it a NOTICE says so and
 * they go on in temporary files (tsdgspill.c), or to the worker in parts.
 *
 * Parallel workers share the scan (tsdgbuildparallel.c), as many as the
 * planner gives a btree build of the table (plan_create_index_workers: the
 * table's parallel_workers storage parameter, else a count growing with its
 * size, within max_parallel_maintenance_workers); PostgreSQL plans workers
 * for btree builds only, so the access method launches them itself.
 * Their arrays are shared and cannot grow during the scan, so a table whose
 * estimate already passes maintenance_work_mem, or a column without a type
 * modifier (no row size before the first row), is scanned by the session
 * alone.
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am_d.h"
#include "commands/progress.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"
#include "tsdgbuild.h"
#include "tsdgworkerclient.h"
#include "vector.h"

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

/*
 * Bytes one row costs during the build: its TID here, the rest in the core's
 * estimate. The navigating layer is built once the graph's builder has
 * freed its arrays, and holds far less a row than they did
 * (tsdg_layer_bytes), so the graph's peak is the build's.
 */
static Size
TsdgBuildBytesPerRow(const TsdgBuildState *bs)
{
	return sizeof(ItemPointerData) + tsdg_build_bytes_per_row(bs->dims, &bs->params);
}

/* the rows whose arrays and graph builder fit maintenance_work_mem, by the estimate above */
int64
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
int64
TsdgFirstCapacity(const TsdgBuildState *bs)
{
	return (int64) (TsdgEstimateHeapRows(bs->heap, bs->dims) * 1.02) + 1024;
}

void
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
		TsdgBuildSegmentRowsWithin(bs->memory_limit, bs->dims, &bs->params, 0) : 0;
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

void
TsdgAddRow(TsdgBuildState *bs, ItemPointer tid, const float *row)
{
	if (bs->count == bs->capacity)
		TsdgGrowArrays(bs);
	memcpy(bs->rows + bs->count * bs->dims, row, sizeof(float) * bs->dims);
	bs->tids[bs->count] = *tid;
	bs->count++;
}

double
TsdgScanHeap(TsdgBuildState *bs, IndexInfo *indexInfo)
{
	double		reltuples;
	int			nworkers = 0;

	if (bs->dims > 0)
		nworkers = plan_create_index_workers(RelationGetRelid(bs->heap),
											 RelationGetRelid(bs->index));
	if (nworkers == 0 || !TsdgParallelHeapScan(bs, indexInfo, nworkers, &reltuples))
		reltuples = table_index_build_scan(bs->heap, bs->index, indexInfo, true, true,
										   TsdgBuildCallback, bs, NULL);
	return reltuples;
}
