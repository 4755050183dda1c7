/*
 * The graph walk of an ordered scan over the index pages in shared buffers:
 * the core's incremental search (tsdg_search_*) picks the nodes, this file
 * reads their lists and scores their neighbors' rows.
 *
 * A row's vector is the walk's main cost: at a few hundred dimensions its
 * cache misses cost more than the distance. So the rows of a batch of nodes
 * are pinned first and each row is prefetched while the one before it is
 * scored, as the core's in-memory search does. A row is read under its pin
 * alone, without the page's content lock: its vector never changes once
 * written (VACUUM only sets the flags of the record's header, and a merge
 * reuses the pages of a graph only once no scan pins the metapage,
 * tsdgmergeswitch.c).
 *
 * Each page is found through a hint first: the buffer the backend last
 * found that block in, checked and pinned by ReadRecentBuffer, which skips
 * the buffer table's lookup and its partition lock. A walk reads each row
 * once, so that lookup would be a cache miss of the shared hash table per
 * row, as dear as the row itself. The hints outlive the scan: the next
 * query of the session walks mostly the same pages.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

/*
 * The hints: one buffer per slot, direct-mapped by block number, for every
 * tsdg index of the backend together (ReadRecentBuffer checks the whole
 * buffer tag, so a slot another block or index took is only a miss).
 */
#define TSDG_BUFFER_HINTS	65536

static Buffer *buffer_hints = NULL;

/* the hint slot of a block; NULL for a temporary index, whose local buffers have no shared table to skip */
static Buffer *
TsdgWalkHint(TsdgPageWalk *walk, BlockNumber block)
{
	if (RelationUsesLocalBuffers(walk->index))
		return NULL;
	if (buffer_hints == NULL)
		buffer_hints = MemoryContextAllocZero(TopMemoryContext, sizeof(Buffer) * TSDG_BUFFER_HINTS);
	return &buffer_hints[(block * 2654435761u + walk->index->rd_node.relNode) % TSDG_BUFFER_HINTS];
}

/*
 * The descriptor ReadRecentBuffer locks first is a cache miss of its own:
 * those of a batch are fetched together before the first is locked.
 */
static inline void
TsdgWalkPrefetchHint(TsdgPageWalk *walk, BlockNumber block)
{
	Buffer	   *hint = TsdgWalkHint(walk, block);

	if (hint != NULL && BufferIsValid(*hint))
		__builtin_prefetch(GetBufferDescriptor(*hint - 1), 1, 3);
}

static Buffer
TsdgWalkReadBuffer(TsdgPageWalk *walk, BlockNumber block)
{
	Buffer	   *hint = TsdgWalkHint(walk, block);
	Buffer		buf;

	if (hint == NULL)
		return ReadBuffer(walk->index, block);
	if (BufferIsValid(*hint) &&
		ReadRecentBuffer(walk->index->rd_node, MAIN_FORKNUM, block, *hint))
	{
		/* counted in pg_statio_*_indexes as ReadBuffer counts a hit */
		pgstat_count_buffer_read(walk->index);
		pgstat_count_buffer_hit(walk->index);
		return *hint;
	}
	buf = ReadBuffer(walk->index, block);
	*hint = buf;
	return buf;
}

void
TsdgWalkInit(TsdgPageWalk *walk, Relation index, const TsdgLayout *layout, TsdgMetric metric,
			 const float *query, uint32 node_count)
{
	walk->index = index;
	walk->layout = layout;
	walk->metric = metric;
	walk->query = query;
	walk->node_count = node_count;
	walk->list_ids = palloc(sizeof(uint32) * layout->degree);
	walk->list_lambdas = palloc(sizeof(uint8) * layout->degree);
	walk->fresh = palloc(sizeof(uint32) * layout->degree);
}

void
TsdgCheckScanNode(Relation index, uint32 id, uint32 node_count)
{
	if (id >= node_count)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("tsdg index \"%s\" refers to node %u of %u",
						RelationGetRelationName(index), id, node_count)));
}

static inline void
TsdgPrefetchVector(const float *vector, int dims)
{
	const char *bytes = (const char *) vector;

	for (Size line = 0; line < sizeof(float) * dims; line += 64)
		__builtin_prefetch(bytes + line, 0, 3);
}

/* Scores the count (at most TSDG_WALK_BATCH) rows of ids into dists. */
static void
TsdgWalkScoreBatch(TsdgPageWalk *walk, const uint32 *ids, int count, float *dists)
{
	const TsdgLayout *layout = walk->layout;

	for (int i = 0; i < count; i++)
	{
		TsdgCheckScanNode(walk->index, ids[i], walk->node_count);
		walk->blocks[i] = TsdgRowBlock(layout, ids[i]);
		TsdgWalkPrefetchHint(walk, walk->blocks[i]);
	}
	for (int i = 0; i < count; i++)
	{
		walk->pins[i] = TsdgWalkReadBuffer(walk, walk->blocks[i]);
		walk->vectors[i] = TsdgRecordVector(TsdgRowRecord(layout, BufferGetPage(walk->pins[i]), ids[i]));
	}
	if (count > 0)
		TsdgPrefetchVector(walk->vectors[0], layout->dims);
	for (int i = 0; i < count; i++)
	{
		if (i + 1 < count)
			TsdgPrefetchVector(walk->vectors[i + 1], layout->dims);
		dists[i] = tsdg_metric_distance(walk->metric, walk->query, walk->vectors[i], layout->dims);
	}
	for (int i = 0; i < count; i++)
		ReleaseBuffer(walk->pins[i]);
}

void
TsdgWalkScore(TsdgPageWalk *walk, const uint32 *ids, int count, float *dists)
{
	for (int first = 0; first < count; first += TSDG_WALK_BATCH)
		TsdgWalkScoreBatch(walk, ids + first, Min(TSDG_WALK_BATCH, count - first), dists + first);
}

void
TsdgWalkOffer(TsdgPageWalk *walk, TsdgSearch *search, const uint32 *ids, int count)
{
	for (int first = 0; first < count; first += TSDG_WALK_BATCH)
	{
		int			batch = Min(TSDG_WALK_BATCH, count - first);

		TsdgWalkScoreBatch(walk, ids + first, batch, walk->dists);
		for (int i = 0; i < batch; i++)
			tsdg_search_offer(search, ids[first + i], walk->dists[i]);
	}
}

/* Reads a node's neighbor list into walk->list_*; returns how many it holds. */
static int
TsdgWalkReadList(TsdgPageWalk *walk, uint32 id)
{
	Buffer		buf = TsdgWalkReadBuffer(walk, TsdgListBlock(walk->layout, id));
	char	   *rec;
	int			count = 0;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	rec = TsdgListRecord(walk->layout, BufferGetPage(buf), id);
	TsdgListRead(walk->layout, rec, walk->list_ids, walk->list_lambdas);
	UnlockReleaseBuffer(buf);

	/* lists are padded at the end */
	while (count < walk->layout->degree && walk->list_ids[count] != TSDG_INVALID_ID)
		count++;
	return count;
}

void
TsdgWalkExpand(TsdgPageWalk *walk, TsdgSearch *search)
{
	uint32		node;

	while ((node = tsdg_search_next(search)) != TSDG_INVALID_ID)
	{
		int			count = TsdgWalkReadList(walk, node);
		int			fresh = tsdg_search_unvisited(search, walk->list_ids, walk->list_lambdas, count,
												  walk->fresh);

		TsdgWalkOffer(walk, search, walk->fresh, fresh);
		CHECK_FOR_INTERRUPTS();
	}
}
