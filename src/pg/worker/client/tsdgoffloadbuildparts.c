/*
 * An index build on the GPU worker in parts (runs in the session that
 * builds): past maintenance_work_mem the session keeps the rows in its own
 * arrays (temporary files) and sends them through a segment that
 * maintenance_work_mem bounds, a part at a time, and takes the graph back the
 * same way. The turns are those of TsdgBuildParts; the session takes its
 * turns from TsdgWorkerBuildGraph's wait, which the worker's wake-ups drive.
 */
#include "postgres.h"

#include "storage/dsm.h"

#include "tsdgoffload.h"

bool
TsdgBuildSegmentCreateInParts(TsdgBuildSegment *bseg, Size max_bytes, int dims,
							  const TsdgBuildParams *params, const TsdgLocalBuildArrays *local)
{
	Size		fixed = TsdgBuildSegmentBytes(0, dims, params, true);
	Size		row = (TsdgBuildSegmentBytes(1024, dims, params, true) - fixed) / 1024 + 1;
	int64		capacity = 1;

	if (max_bytes > fixed)
		capacity = Max((int64) ((max_bytes - fixed) / row), 1);
	/* the arrays' alignment: never past max_bytes but for a single row */
	while (capacity > 1 && TsdgBuildSegmentBytes(capacity, dims, params, true) > max_bytes)
		capacity--;
	if (!TsdgBuildSegmentMake(bseg, capacity, dims, params, true))
		return false;
	bseg->local = *local;
	return true;
}

/* rows [first, first + count) of part i of n rows, parts of capacity rows */
static int64
TsdgPartRows(int64 i, int64 capacity, int64 n, int64 *first)
{
	*first = i * capacity;
	return Min(capacity, n - *first);
}

bool
TsdgTakeBuildTurns(TsdgBuildSegment *bseg, int64 n, int dims, const TsdgBuildParams *params)
{
	TsdgBuildParts *parts = bseg->parts;
	int64		count = (n + bseg->capacity - 1) / bseg->capacity;
	uint64		sent = pg_atomic_read_u64(&parts->rows_sent);
	uint64		graph_sent;
	int64		first;
	int64		rows;

	/* the next part of the rows, once the worker took the one before */
	if (sent < (uint64) count && pg_atomic_read_u64(&parts->rows_taken) == sent)
	{
		/* the worker is done reading the segment's rows: a full barrier */
		pg_memory_barrier();
		rows = TsdgPartRows((int64) sent, bseg->capacity, n, &first);
		memcpy(bseg->rows, bseg->local.rows + first * dims, sizeof(float) * dims * rows);
		memcpy(bseg->tids, bseg->local.tids + first, sizeof(ItemPointerData) * rows);
		pg_write_barrier();
		pg_atomic_write_u64(&parts->rows_sent, ++sent);
		pg_memory_barrier();
		TsdgIpcWakeServer();
	}

	/* the part of the graph the worker sent, if any */
	graph_sent = pg_atomic_read_u64(&parts->graph_sent);
	if (graph_sent == pg_atomic_read_u64(&parts->graph_taken) + 1 && graph_sent <= (uint64) count)
	{
		uint64		part = graph_sent - 1;

		pg_read_barrier();
		rows = TsdgPartRows((int64) part, bseg->capacity, n, &first);
		memcpy(bseg->local.neighbors + first * params->degree, bseg->neighbors,
			   sizeof(uint32) * params->degree * rows);
		memcpy(bseg->local.lambdas + first * params->degree, bseg->lambdas,
			   sizeof(uint8) * params->degree * rows);
		memcpy(bseg->local.knn_ids + first * params->build_k, bseg->knn_ids,
			   sizeof(uint32) * params->build_k * rows);
		/* read before the worker writes the next part: a full barrier */
		pg_memory_barrier();
		pg_atomic_write_u64(&parts->graph_taken, graph_sent);
		pg_memory_barrier();
		TsdgIpcWakeServer();
	}
	return sent == (uint64) count;
}
