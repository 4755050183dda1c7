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
 *
 * The groups need the rows only, so a build on the GPU worker finds them
 * while the worker builds the graph and links them once it has it.
 */
#include "postgres.h"

#include "miscadmin.h"

#include "tsdg.h"

typedef struct TsdgRowHash
{
	uint64		hash;
	uint32		id;
} TsdgRowHash;

#define ST_SORT TsdgSortRowHashes
#define ST_ELEMENT_TYPE TsdgRowHash
#define ST_COMPARE(a, b) \
	((a)->hash != (b)->hash ? ((a)->hash < (b)->hash ? -1 : 1) : \
	 ((a)->id > (b)->id) - ((a)->id < (b)->id))
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * A hash of a row's bytes in four independent lanes of 64-bit words, so that
 * hashing every row costs about a read of the rows; equal hashes are only
 * candidates, compared byte for byte.
 */
static uint64
TsdgHashRow(const float *row, int dims)
{
	const char *bytes = (const char *) row;
	Size		size = sizeof(float) * dims;
	uint64		lane[4] = {UINT64CONST(0x9E3779B97F4A7C15), UINT64CONST(0xC2B2AE3D27D4EB4F),
	UINT64CONST(0x165667B19E3779F9), UINT64CONST(0x27D4EB2F165667C5)};
	Size		at = 0;
	uint64		word;
	uint64		hash;

	for (; at + 32 <= size; at += 32)
		for (int i = 0; i < 4; i++)
		{
			memcpy(&word, bytes + at + 8 * i, sizeof(word));
			lane[i] = (lane[i] ^ word) * UINT64CONST(0xFF51AFD7ED558CCD);
			lane[i] ^= lane[i] >> 29;
		}
	for (int i = 0; at < size; at += sizeof(uint32), i++)
	{
		uint32		tail;

		memcpy(&tail, bytes + at, sizeof(tail));
		lane[i % 4] = (lane[i % 4] ^ tail) * UINT64CONST(0xFF51AFD7ED558CCD);
		lane[i % 4] ^= lane[i % 4] >> 29;
	}
	hash = size;
	for (int i = 0; i < 4; i++)
	{
		hash = (hash ^ lane[i]) * UINT64CONST(0xC4CEB9FE1A85EC53);
		hash ^= hash >> 32;
	}
	return hash;
}

/* appends a group of count rows to groups, whose arrays grow by doubling */
static void
TsdgAddDuplicateGroup(TsdgDuplicateGroups *groups, const TsdgRowHash *copies, int64 count)
{
	if (groups->rows + count > groups->id_capacity)
	{
		groups->id_capacity = Max(groups->id_capacity * 2, groups->rows + count + 64);
		groups->ids = groups->ids == NULL ?
			MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * groups->id_capacity) :
			repalloc_huge(groups->ids, sizeof(uint32) * groups->id_capacity);
	}
	if (groups->groups == groups->group_capacity)
	{
		groups->group_capacity = Max(groups->group_capacity * 2, 64);
		groups->ends = groups->ends == NULL ?
			MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int64) * groups->group_capacity) :
			repalloc_huge(groups->ends, sizeof(int64) * groups->group_capacity);
	}
	for (int64 i = 0; i < count; i++)
		groups->ids[groups->rows++] = copies[i].id;
	groups->ends[groups->groups++] = groups->rows;
}

/*
 * The groups of identical rows among rows (n * dims): their ids in id order,
 * group after group. NULL when every row is unique.
 */
TsdgDuplicateGroups *
TsdgFindDuplicates(const float *rows, int64 n, int dims)
{
	Size		row_bytes = sizeof(float) * dims;
	TsdgRowHash *hashes;
	TsdgDuplicateGroups *groups = NULL;
	int64		start;

	if (n < 2)
		return NULL;
	hashes = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(TsdgRowHash) * n);
	for (int64 i = 0; i < n; i++)
	{
		hashes[i].hash = TsdgHashRow(rows + i * dims, dims);
		hashes[i].id = (uint32) i;
		if ((i & 0xFFFF) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	TsdgSortRowHashes(hashes, n);

	/*
	 * Within a run of one hash, the copies of its first row form a group; rows
	 * that only share the hash start a later pass over what is left. The
	 * copies are moved to the front of the run, in id order, and a group's
	 * ids are kept in place in hashes until the groups are collected.
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
				if (groups == NULL)
					groups = palloc0(sizeof(TsdgDuplicateGroups));
				TsdgAddDuplicateGroup(groups, hashes + start, same - start);
			}
			start = same;
			CHECK_FOR_INTERRUPTS();
		}
		start = end;
	}
	pfree(hashes);
	return groups;
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

/* Links each group of groups into a ring in neighbors and lambdas (n * degree). */
void
TsdgLinkDuplicates(const TsdgDuplicateGroups *groups, uint32 *neighbors, uint8 *lambdas,
				   int degree)
{
	int64		start = 0;

	if (groups == NULL || degree < 1)
		return;
	for (int64 g = 0; g < groups->groups; g++)
	{
		int64		end = groups->ends[g];

		for (int64 i = start; i < end; i++)
		{
			uint32		from = groups->ids[i];
			uint32		to = groups->ids[i + 1 < end ? i + 1 : start];

			TsdgLinkCopy(neighbors + (Size) from * degree, lambdas + (Size) from * degree,
						 degree, to);
		}
		start = end;
	}
}
