/*
 * Rows with identical vectors, linked in the search graph.
 *
 * Diversification keeps an edge only when no kept neighbor is nearer to its
 * target than the node itself (the occlusion rule of TSDG): among identical
 * vectors every distance is zero, so each copy keeps at most one edge to the
 * others, and a walk from the entry points reaches only some of the copies.
 * A query equal to them would then see the rest only after every reachable
 * row, out of order. Each group of copies is therefore linked into a ring,
 * every copy's list giving one slot (a free one if it has any, else its last)
 * to the next copy, with the smallest occlusion factor so that every search
 * follows it: reaching one copy reaches them all, nearest first.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"

#include "tsdg.h"

typedef struct TsdgRowHash
{
	uint64		hash;
	uint32		id;
} TsdgRowHash;

static int
TsdgCompareRowHashes(const void *a, const void *b)
{
	const TsdgRowHash *x = (const TsdgRowHash *) a;
	const TsdgRowHash *y = (const TsdgRowHash *) b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Gives node from's list an edge to node to, unless it has one. */
static void
TsdgLinkCopy(uint32 *list, uint8 *lambdas, int degree, uint32 to)
{
	int			slot = degree - 1;

	for (int i = 0; i < degree; i++)
	{
		if (list[i] == to)
			return;
		if (list[i] == TSDG_INVALID_ID)
		{
			slot = i;
			break;
		}
	}
	list[slot] = to;
	lambdas[slot] = 0;
}

/*
 * Links each group of identical rows (rows: n * dims, as the graph was built
 * from) in neighbors and lambdas (n * degree). Returns how many rows were in
 * such groups.
 */
int64
TsdgLinkDuplicates(const float *rows, int64 n, int dims, uint32 *neighbors, uint8 *lambdas,
				   int degree)
{
	Size		row_bytes = sizeof(float) * dims;
	TsdgRowHash *hashes;
	int64		linked = 0;
	int64		start;

	if (n < 2 || degree < 1)
		return 0;
	hashes = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(TsdgRowHash) * n);
	for (int64 i = 0; i < n; i++)
	{
		hashes[i].hash = hash_bytes_extended((const unsigned char *) (rows + i * dims),
											 (int) row_bytes, 0);
		hashes[i].id = (uint32) i;
	}
	qsort(hashes, n, sizeof(TsdgRowHash), TsdgCompareRowHashes);

	/*
	 * Within a run of one hash, the copies of its first row form a group; rows
	 * that only share the hash start a later pass over what is left.
	 */
	for (start = 0; start < n;)
	{
		int64		end = start + 1;

		while (end < n && hashes[end].hash == hashes[start].hash)
			end++;
		while (end - start > 1)
		{
			const float *first = rows + (Size) hashes[start].id * dims;
			int64		same = start + 1;

			/* the copies of first to the front of the run, in id order */
			for (int64 i = start + 1; i < end; i++)
			{
				if (memcmp(rows + (Size) hashes[i].id * dims, first, row_bytes) == 0)
				{
					TsdgRowHash copy = hashes[i];

					memmove(&hashes[same + 1], &hashes[same], sizeof(TsdgRowHash) * (i - same));
					hashes[same++] = copy;
				}
			}
			if (same - start > 1)
			{
				for (int64 i = start; i < same; i++)
				{
					uint32		from = hashes[i].id;
					uint32		to = hashes[i + 1 < same ? i + 1 : start].id;

					TsdgLinkCopy(neighbors + (Size) from * degree, lambdas + (Size) from * degree,
								 degree, to);
				}
				linked += same - start;
			}
			start = same;
			CHECK_FOR_INTERRUPTS();
		}
		start = end;
	}
	pfree(hashes);
	return linked;
}
