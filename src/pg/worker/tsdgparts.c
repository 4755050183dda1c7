/*
 * Requests in parts (tsdgparts.h): which rows of which arrays a part holds
 * and where they lie in the segment, for the session and the worker alike,
 * and the session's turns.
 */
#include "postgres.h"

#include "tsdgparts.h"

void
TsdgInitPartTurns(TsdgPartTurns *turns)
{
	pg_atomic_init_u64(&turns->in_sent, 0);
	pg_atomic_init_u64(&turns->in_taken, 0);
	pg_atomic_init_u64(&turns->out_sent, 0);
	pg_atomic_init_u64(&turns->out_taken, 0);
}

static void
TsdgPartStreamInit(TsdgPartStream *stream, int64 capacity)
{
	memset(stream, 0, sizeof(TsdgPartStream));
	stream->first = -1;
	stream->capacity = capacity;
}

/* rows [first, end) of the array at local travel in the segment's part at offset (0: it does not) */
static void
TsdgPartStreamAdd(TsdgPartStream *stream, Size offset, Size row_bytes, int64 first, int64 end,
				  void *local)
{
	TsdgPartArray *array;

	if (offset == 0 || first >= end)
		return;
	Assert(stream->count < TSDG_PART_MAX_ARRAYS);
	array = &stream->arrays[stream->count++];
	array->offset = offset;
	array->row_bytes = row_bytes;
	array->first = first;
	array->end = end;
	array->local = local;
	if (stream->first < 0 || first < stream->first)
		stream->first = first;
	stream->end = Max(stream->end, end);
}

int64
TsdgPartCount(const TsdgPartStream *stream)
{
	if (stream->count == 0)
		return 0;
	return (stream->end - stream->first + stream->capacity - 1) / stream->capacity;
}

void
TsdgCopyPart(const TsdgPartStream *stream, void *base, int64 i, bool into_segment)
{
	int64		lo = stream->first + i * stream->capacity;
	int64		hi = Min(stream->end, lo + stream->capacity);

	for (int a = 0; a < stream->count; a++)
	{
		const TsdgPartArray *array = &stream->arrays[a];
		int64		from = Max(lo, array->first);
		int64		to = Min(hi, array->end);
		char	   *part;
		char	   *local;

		if (from >= to)
			continue;
		part = (char *) base + array->offset + (Size) (from - lo) * array->row_bytes;
		local = array->local + (Size) from * array->row_bytes;
		if (into_segment)
			memcpy(part, local, (Size) (to - from) * array->row_bytes);
		else
			memcpy(local, part, (Size) (to - from) * array->row_bytes);
	}
}

void
TsdgBuildPartStreams(const TsdgBulkHeader *header, int64 n, int dims,
					 const TsdgBuildParams *params, const TsdgBuildPartArrays *arrays,
					 TsdgPartStream *in, TsdgPartStream *out)
{
	TsdgPartStreamInit(in, header->capacity);
	TsdgPartStreamAdd(in, header->rows, sizeof(float) * dims, 0, n, arrays->rows);
	TsdgPartStreamAdd(in, header->tids, sizeof(ItemPointerData), 0, n, arrays->tids);
	TsdgPartStreamInit(out, header->capacity);
	TsdgPartStreamAdd(out, header->neighbors, sizeof(uint32) * params->degree, 0, n,
					  arrays->neighbors);
	TsdgPartStreamAdd(out, header->lambdas, sizeof(uint8) * params->degree, 0, n, arrays->lambdas);
	TsdgPartStreamAdd(out, header->knn_ids, sizeof(uint32) * params->build_k, 0, n,
					  arrays->knn_ids);
}

/*
 * The rows past the old ones go in, from the first the worker does not hold
 * (rows_resident: the old rows and TIDs are its copy's); the old lists only
 * when its copy lacks them, whatever the header says, so that no part is
 * ever written into the copy.
 */
void
TsdgMergePartStreams(const TsdgBulkHeader *header, const TsdgMergeArgs *args,
					 const TsdgMergePartArrays *arrays, TsdgPartStream *in, TsdgPartStream *out)
{
	int64		n_old = args->n_old;
	int64		n = n_old + args->n_new;
	int64		rows_from = args->rows_resident ? n_old : 0;
	int			k = args->params.build_k;
	int			degree = args->params.degree;

	TsdgPartStreamInit(in, header->capacity);
	TsdgPartStreamAdd(in, header->rows, sizeof(float) * args->dims, rows_from, n, arrays->rows);
	TsdgPartStreamAdd(in, header->tids, sizeof(ItemPointerData), rows_from, n, arrays->tids);
	if (!args->graph_resident)
	{
		TsdgPartStreamAdd(in, header->knn_ids, sizeof(uint32) * k, 0, n_old, arrays->old_knn_ids);
		TsdgPartStreamAdd(in, header->neighbors, sizeof(uint32) * degree, 0, n_old,
						  arrays->old_neighbors);
		TsdgPartStreamAdd(in, header->lambdas, sizeof(uint8) * degree, 0, n_old,
						  arrays->old_lambdas);
	}
	TsdgPartStreamAdd(in, header->dists, sizeof(float) * k, 0, n_old, arrays->old_knn_dists);
	TsdgPartStreamAdd(in, header->flags, sizeof(uint8), 0, n_old, arrays->old_changed);

	TsdgPartStreamInit(out, header->capacity);
	TsdgPartStreamAdd(out, header->merged_knn_ids, sizeof(uint32) * k, 0, n, arrays->knn_ids);
	TsdgPartStreamAdd(out, header->merged_neighbors, sizeof(uint32) * degree, 0, n,
					  arrays->neighbors);
	TsdgPartStreamAdd(out, header->merged_lambdas, sizeof(uint8) * degree, 0, n, arrays->lambdas);
	TsdgPartStreamAdd(out, header->changed, sizeof(uint8), 0, n, arrays->changed);
}

bool
TsdgTakePartTurns(TsdgPartTurns *turns, void *base, const TsdgPartStream *in,
				  const TsdgPartStream *out)
{
	int64		in_count = TsdgPartCount(in);
	int64		out_count = TsdgPartCount(out);
	uint64		sent = pg_atomic_read_u64(&turns->in_sent);
	uint64		out_sent;

	/* the next in-part, once the worker took the one before */
	if (sent < (uint64) in_count && pg_atomic_read_u64(&turns->in_taken) == sent)
	{
		/* the worker is done reading the segment's part: a full barrier */
		pg_memory_barrier();
		TsdgCopyPart(in, base, (int64) sent, true);
		pg_write_barrier();
		pg_atomic_write_u64(&turns->in_sent, ++sent);
		pg_memory_barrier();
		TsdgIpcWakeServer();
	}

	/* the out-part the worker sent, if any */
	out_sent = pg_atomic_read_u64(&turns->out_sent);
	if (out_sent == pg_atomic_read_u64(&turns->out_taken) + 1 && out_sent <= (uint64) out_count)
	{
		pg_read_barrier();
		TsdgCopyPart(out, base, (int64) out_sent - 1, false);
		/* read before the worker writes the next part: a full barrier */
		pg_memory_barrier();
		pg_atomic_write_u64(&turns->out_taken, out_sent);
		pg_memory_barrier();
		TsdgIpcWakeServer();
	}
	return sent == (uint64) in_count;
}
