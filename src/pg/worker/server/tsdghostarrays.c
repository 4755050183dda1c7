/*
 * Host memory of the GPU worker's merged graphs (in the GPU server process):
 * the rows and k-NN lists of a graph the worker merged and keeps for the
 * next merge. They lie here rather than in the merge's shared memory
 * segment, which the session makes and the kernel zeroes before the request,
 * a wait that grows with the graph: each merge takes the arrays of the graph
 * two merges back, which the graph it merges from replaced, so a run of
 * merges grows into arrays with room to spare and faults in no new memory.
 * Each array has pages of its own, which the page-locking of a graph's k-NN
 * lists may lock whole (tsdgservercache.c). Spares nobody took within
 * TSDG_SPARE_IDLE_SECONDS are given back to the kernel.
 */
#include "postgres.h"

#include <sys/mman.h>

#include "utils/timestamp.h"

#include "tsdgworkerserver.h"

#define TSDG_SPARE_ARRAYS			4
#define TSDG_SPARE_IDLE_SECONDS		30
/* an array has room for 1/this more: the graph grows by each merge */
#define TSDG_ARRAY_GROWTH_ROOM		4
#define TSDG_HUGE_PAGE				((Size) 2 << 20)
/* the mapping's size before the array; a page keeps the array page-aligned */
#define TSDG_ARRAY_HEADER			((Size) 4096)

typedef struct SpareArray
{
	char	   *mapping;			/* NULL: none */
	Size		size;
	TimestampTz freed_at;
} SpareArray;

static SpareArray spares[TSDG_SPARE_ARRAYS];

static void
UnmapSpare(SpareArray *spare)
{
	(void) munmap(spare->mapping, spare->size);
	memset(spare, 0, sizeof(SpareArray));
}

void *
TsdgTakeHostArray(Size bytes)
{
	SpareArray *best = NULL;
	Size		size;
	char	   *mapping;

	for (int i = 0; i < TSDG_SPARE_ARRAYS; i++)
		if (spares[i].mapping != NULL && spares[i].size - TSDG_ARRAY_HEADER >= bytes &&
			(best == NULL || spares[i].size < best->size))
			best = &spares[i];
	if (best != NULL)
	{
		mapping = best->mapping;
		memset(best, 0, sizeof(SpareArray));
		return mapping + TSDG_ARRAY_HEADER;
	}

	size = TYPEALIGN(TSDG_HUGE_PAGE, TSDG_ARRAY_HEADER + bytes + bytes / TSDG_ARRAY_GROWTH_ROOM);
	mapping = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED)
	{
		/* spares too small to take may be what the memory went to */
		for (int i = 0; i < TSDG_SPARE_ARRAYS; i++)
			if (spares[i].mapping != NULL)
				UnmapSpare(&spares[i]);
		mapping = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mapping == MAP_FAILED)
			return NULL;
	}
	/* GNND and GGM gather rows and lists at random: fewer TLB misses (a hint only) */
	(void) madvise(mapping, size, MADV_HUGEPAGE);
	*(Size *) mapping = size;
	return mapping + TSDG_ARRAY_HEADER;
}

void
TsdgGiveBackHostArray(void *array)
{
	SpareArray *slot = NULL;
	SpareArray	given;

	if (array == NULL)
		return;
	given.mapping = (char *) array - TSDG_ARRAY_HEADER;
	given.size = *(Size *) given.mapping;
	given.freed_at = GetCurrentTimestamp();
	/* a free slot, else the smallest spare, which goes if smaller than this one */
	for (int i = 0; i < TSDG_SPARE_ARRAYS; i++)
	{
		if (spares[i].mapping == NULL)
		{
			slot = &spares[i];
			break;
		}
		if (slot == NULL || spares[i].size < slot->size)
			slot = &spares[i];
	}
	if (slot->mapping != NULL && slot->size >= given.size)
	{
		UnmapSpare(&given);
		return;
	}
	if (slot->mapping != NULL)
		UnmapSpare(slot);
	*slot = given;
}

void
TsdgReleaseIdleHostArrays(void)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < TSDG_SPARE_ARRAYS; i++)
		if (spares[i].mapping != NULL &&
			now - spares[i].freed_at > (TimestampTz) TSDG_SPARE_IDLE_SECONDS * USECS_PER_SEC)
			UnmapSpare(&spares[i]);
}
