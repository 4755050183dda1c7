/*
 * What a backend's scans start from, kept from one scan to the next: the
 * graph's navigating layer, made searchable, or its navigating set's rows.
 *
 * A graph of TSDG_LAYER_MIN_NODES nodes or more has a navigating layer
 * (tsdglayer.c): every TSDG_LAYER_STRIDE-th node, linked by a graph of its
 * own. A search walks it first, at tsdg_layer_entry_count(ef), and starts
 * its walk on the index's graph from what that walk found. The first search
 * of such a graph in a backend reads the layer's rows and lists into a
 * TsdgLayerSearch; later searches walk it in memory. A layer larger than
 * tsdg.navigating_cache_mem is not kept, and the searches start from the
 * navigating set, as those of a graph without a layer do.
 *
 * The navigating set (tsdg_navigating_set: the metapage's entry points and
 * every stride-th node) is scored whole by every search that starts from
 * it, tens of thousands of rows past a few million nodes. Read from the
 * row pages, each row costs a buffer lookup, a pin and cache misses, and
 * every query of a session reads the same rows again. So the first search
 * of a graph in a backend copies those rows into one contiguous array, and
 * later searches score them from there in one pass: the same entries, in
 * the same order, with the same distances, since the same kernel scores the
 * same floats.
 *
 * A copy belongs to one graph. It is keyed by the index's storage (REINDEX,
 * TRUNCATE, VACUUM FULL and a move to another tablespace give an index new
 * storage) and by the metapage's graph_version, which every merge bumps (a
 * merge appends rows, and may renumber them when it drops deleted nodes),
 * together with the node count, the stamp of the last merge and the entry
 * points, so that storage whose number is given out again never meets a
 * copy of another graph. A row never changes in place while its graph
 * lasts (VACUUM only flags deleted nodes, which still route searches), so a
 * copy needs no update while its key holds; the copy of an index's older
 * graph is dropped when a search meets the new one.
 *
 * The copies of all of a backend's indexes together stay within
 * tsdg.navigating_cache_mem, the least recently used dropped first. A
 * navigating set larger than that is read from the pages by every search.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

int			tsdg_navigating_cache_mem = TSDG_DEFAULT_NAVIGATING_CACHE_MEM;

/* which graph a copy is of; zeroed before it is filled, so it compares as bytes */
typedef struct TsdgNavigatingKey
{
	RelFileNode node;
	BackendId	backend;		/* of a temporary index, whose storage is the backend's */
	int32		dims;
	uint32		node_count;
	uint64		graph_version;
	int64		last_merge;
	uint64		merge_count;
	int32		entry_count;
	uint32		entry_points[TSDG_MAX_ENTRY_POINTS];
	bool		layer;			/* a copy of the layer, not of the navigating set */
} TsdgNavigatingKey;

typedef struct TsdgNavigatingCopy
{
	struct TsdgNavigatingCopy *next;
	MemoryContext ctx;			/* holds this struct and its arrays */
	Oid			index_oid;
	TsdgNavigatingKey key;
	int			count;
	uint32	   *ids;			/* tsdg_navigating_set's order */
	float	   *rows;			/* count x dims */
	float	   *dists;			/* a search's distances to them */
	TsdgLayerSearch *layer;		/* a copy of the layer: it alone, freed with ctx */
	Size		bytes;
	uint64		last_used;
} TsdgNavigatingCopy;

static MemoryContext navigating_ctx = NULL;
static TsdgNavigatingCopy *copies = NULL;
static uint64 navigating_clock = 0;

static void
TsdgNavigatingKeyOf(TsdgNavigatingKey *key, Relation index, const TsdgMetaPageData *meta, bool layer)
{
	MemSet(key, 0, sizeof(TsdgNavigatingKey));
	key->node = index->rd_node;
	key->backend = index->rd_backend;
	key->dims = meta->dims;
	key->node_count = meta->node_count;
	key->graph_version = meta->graph_version;
	key->last_merge = meta->last_merge;
	key->merge_count = meta->merge_count;
	key->entry_count = meta->entry_count;
	memcpy(key->entry_points, meta->entry_points, sizeof(uint32) * meta->entry_count);
	key->layer = layer;
}

/*
 * what a copy of a navigating set of count rows of dims holds; a set is
 * checked against the budget by its entry points and strided nodes, before
 * the few that are both are counted once, so that the check needs no ids
 */
static Size
TsdgNavigatingBytes(int64 count, int dims)
{
	return (Size) count * (sizeof(uint32) + sizeof(float) * (dims + 1));
}

bool
TsdgNavigatingSetFits(int64 count, int dims)
{
	return TsdgNavigatingBytes(count, dims) <= (Size) tsdg_navigating_cache_mem * 1024;
}

static void
TsdgDropCopy(TsdgNavigatingCopy *copy)
{
	TsdgNavigatingCopy **link = &copies;

	while (*link != copy)
		link = &(*link)->next;
	*link = copy->next;
	MemoryContextDelete(copy->ctx);
}

/*
 * Drops the copies of index other than one of key, then the least recently
 * used until room bytes more fit tsdg.navigating_cache_mem.
 */
static void
TsdgMakeRoom(Oid index_oid, const TsdgNavigatingKey *key, Size room)
{
	Size		budget = (Size) tsdg_navigating_cache_mem * 1024;
	Size		held = 0;
	TsdgNavigatingCopy *copy;
	TsdgNavigatingCopy *next;

	for (copy = copies; copy != NULL; copy = next)
	{
		next = copy->next;
		if (copy->index_oid == index_oid &&
			memcmp(&copy->key, key, sizeof(TsdgNavigatingKey)) != 0)
			TsdgDropCopy(copy);
		else
			held += copy->bytes;
	}
	while (held + room > budget && copies != NULL)
	{
		TsdgNavigatingCopy *oldest = copies;

		for (copy = copies->next; copy != NULL; copy = copy->next)
			if (copy->last_used < oldest->last_used)
				oldest = copy;
		held -= oldest->bytes;
		TsdgDropCopy(oldest);
	}
}

/* the rows of count nodes (ids[i], or i * stride without ids) into rows */
static void
TsdgCopyRows(TsdgPageWalk *walk, int64 count, const uint32 *ids, uint32 stride, float *rows)
{
	const TsdgLayout *layout = walk->layout;
	int			dims = layout->dims;
	Buffer		buf = InvalidBuffer;
	BlockNumber held = InvalidBlockNumber;

	for (int64 i = 0; i < count; i++)
	{
		uint32		node = ids != NULL ? ids[i] : (uint32) (i * stride);
		BlockNumber block;

		TsdgCheckScanNode(walk->index, node, walk->node_count);
		block = TsdgRowBlock(layout, node);
		if (block != held)
		{
			if (BufferIsValid(buf))
				UnlockReleaseBuffer(buf);
			CHECK_FOR_INTERRUPTS();
			buf = ReadBuffer(walk->index, block);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			held = block;
		}
		memcpy(rows + (Size) i * dims,
			   TsdgRecordVector(TsdgRowRecord(layout, BufferGetPage(buf), node)),
			   sizeof(float) * dims);
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

/* a complete copy, moved under the backend's copies */
static void
TsdgKeepCopy(TsdgNavigatingCopy *copy)
{
	if (navigating_ctx == NULL)
		navigating_ctx = AllocSetContextCreate(TopMemoryContext, "tsdg navigating sets",
											   ALLOCSET_SMALL_SIZES);
	MemoryContextSetParent(copy->ctx, navigating_ctx);
	copy->next = copies;
	copies = copy;
}

/*
 * Copies the rows of the navigating set ids from the pages. The copy's
 * context hangs under the caller's until it is complete, so that an error
 * or a cancel on the way frees it with the caller's memory.
 */
static TsdgNavigatingCopy *
TsdgCopyNavigatingSet(TsdgPageWalk *walk, const TsdgNavigatingKey *key, const uint32 *ids,
					  int count)
{
	MemoryContext ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg navigating set",
											  ALLOCSET_SMALL_SIZES);
	int			dims = walk->layout->dims;
	TsdgNavigatingCopy *copy = MemoryContextAlloc(ctx, sizeof(TsdgNavigatingCopy));

	copy->ctx = ctx;
	copy->index_oid = RelationGetRelid(walk->index);
	memcpy(&copy->key, key, sizeof(TsdgNavigatingKey));
	copy->count = count;
	copy->layer = NULL;
	copy->bytes = TsdgNavigatingBytes(count, dims);
	copy->ids = MemoryContextAllocHuge(ctx, sizeof(uint32) * Max(count, 1));
	copy->rows = MemoryContextAllocHuge(ctx, sizeof(float) * dims * Max(count, 1));
	copy->dists = MemoryContextAllocHuge(ctx, sizeof(float) * Max(count, 1));
	memcpy(copy->ids, ids, sizeof(uint32) * count);
	TsdgCopyRows(walk, count, ids, 0, copy->rows);
	TsdgKeepCopy(copy);
	return copy;
}

int64
TsdgNavigatingSetMost(const TsdgMetaPageData *meta)
{
	return meta->entry_count + tsdg_strided_entry_count(meta->node_count);
}

/* the ids of the navigating set into ids (room for TsdgNavigatingSetMost), in the order every reader offers them */
static int
TsdgNavigatingIds(const TsdgMetaPageData *meta, uint32 *ids)
{
	return tsdg_navigating_set(meta->entry_points, meta->entry_count, meta->node_count, ids);
}

/*
 * The backend's copy of meta's navigating set, made from the pages if it
 * has none; NULL when the set is larger than tsdg.navigating_cache_mem.
 */
static TsdgNavigatingCopy *
TsdgNavigatingCopyOf(TsdgPageWalk *walk, const TsdgMetaPageData *meta)
{
	int			dims = walk->layout->dims;
	TsdgNavigatingKey key;
	TsdgNavigatingCopy *copy;

	if (!TsdgNavigatingSetFits(TsdgNavigatingSetMost(meta), dims))
		return NULL;

	TsdgNavigatingKeyOf(&key, walk->index, meta, false);
	for (copy = copies; copy != NULL; copy = copy->next)
		if (copy->index_oid == RelationGetRelid(walk->index) &&
			memcmp(&copy->key, &key, sizeof(TsdgNavigatingKey)) == 0)
			break;
	if (copy == NULL)
	{
		uint32	   *ids = palloc(sizeof(uint32) * TsdgNavigatingSetMost(meta));
		int			count = TsdgNavigatingIds(meta, ids);

		TsdgMakeRoom(RelationGetRelid(walk->index), &key, TsdgNavigatingBytes(count, dims));
		copy = TsdgCopyNavigatingSet(walk, &key, ids, count);
		pfree(ids);
		copy->last_used = ++navigating_clock;
	}
	else
	{
		/* the newest, and within the budget alone: what a lowered budget drops is the others */
		copy->last_used = ++navigating_clock;
		TsdgMakeRoom(RelationGetRelid(walk->index), &key, 0);
	}
	return copy;
}

/* the distances of the walk's query to the rows of copy, into copy->dists */
static void
TsdgScoreCopy(TsdgPageWalk *walk, TsdgNavigatingCopy *copy)
{
	int			dims = walk->layout->dims;

	for (int i = 0; i < copy->count; i++)
		copy->dists[i] = tsdg_metric_distance(walk->metric, walk->query,
											  copy->rows + (Size) i * dims, dims);
}

/*
 * what a copy of a layer of layer_nodes of dims holds: its rows, its lists,
 * and its search's visited marks and navigating set
 */
static Size
TsdgLayerBytes(int64 layer_nodes, int dims, int degree)
{
	return (Size) layer_nodes * (sizeof(float) * dims + (sizeof(uint32) + 1) * degree + 2 * sizeof(uint32)) +
		(Size) TSDG_MAX_ENTRY_POINTS * sizeof(float) * (dims + 2);
}

static void
TsdgFreeLayerSearch(void *arg)
{
	tsdg_layer_search_free((TsdgLayerSearch *) arg);
}

bool
TsdgLayerFits(int64 layer_nodes, int dims, int degree)
{
	return TsdgLayerBytes(layer_nodes, dims, degree) <= (Size) tsdg_navigating_cache_mem * 1024;
}

/*
 * Reads meta's layer, its lists and its nodes' rows, into a TsdgLayerSearch,
 * freed with the copy's context. The context hangs under the caller's until
 * the copy is complete, as TsdgCopyNavigatingSet's does; a copy not kept
 * stays there, and goes with the caller's memory.
 */
static TsdgNavigatingCopy *
TsdgCopyLayer(TsdgPageWalk *walk, const TsdgNavigatingKey *key, const TsdgMetaPageData *meta,
			  bool keep)
{
	MemoryContext ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg navigating layer",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old_ctx = MemoryContextSwitchTo(ctx);
	int			dims = walk->layout->dims;
	int64		layer_nodes = meta->layer_nodes;
	TsdgNavigatingCopy *copy = palloc0(sizeof(TsdgNavigatingCopy));
	float	   *rows = MemoryContextAllocHuge(ctx, sizeof(float) * dims * layer_nodes);
	uint32	   *ids = MemoryContextAllocHuge(ctx, sizeof(uint32) * meta->degree * layer_nodes);
	uint8	   *lambdas = MemoryContextAllocHuge(ctx, (Size) meta->degree * layer_nodes);
	MemoryContextCallback *cb;
	TsdgError	error;

	copy->ctx = ctx;
	copy->index_oid = RelationGetRelid(walk->index);
	memcpy(&copy->key, key, sizeof(TsdgNavigatingKey));
	copy->bytes = TsdgLayerBytes(layer_nodes, dims, meta->degree);
	TsdgCopyRows(walk, layer_nodes, NULL, TSDG_LAYER_STRIDE, rows);
	TsdgReadLayer(walk->index, meta, ids, lambdas);

	copy->layer = tsdg_layer_search_create(rows, layer_nodes, dims, walk->metric, ids, lambdas,
										   meta->degree, &error);
	if (copy->layer == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not read the navigating layer of tsdg index \"%s\": %s",
						RelationGetRelationName(walk->index), error.message)));
	cb = palloc(sizeof(MemoryContextCallback));
	cb->func = TsdgFreeLayerSearch;
	cb->arg = copy->layer;
	MemoryContextRegisterResetCallback(ctx, cb);
	pfree(rows);
	pfree(ids);
	pfree(lambdas);
	MemoryContextSwitchTo(old_ctx);
	if (keep)
		TsdgKeepCopy(copy);
	return copy;
}

/*
 * The backend's copy of meta's layer, made from the pages if it has none;
 * NULL when the graph has no layer or it is larger than
 * tsdg.navigating_cache_mem.
 */
static TsdgNavigatingCopy *
TsdgLayerCopyOf(TsdgPageWalk *walk, const TsdgMetaPageData *meta)
{
	TsdgNavigatingKey key;
	TsdgNavigatingCopy *copy;
	Size		bytes;

	if (meta->layer_nodes == 0 || !TsdgLayerFits(meta->layer_nodes, walk->layout->dims, meta->degree))
		return NULL;
	bytes = TsdgLayerBytes(meta->layer_nodes, walk->layout->dims, meta->degree);

	TsdgNavigatingKeyOf(&key, walk->index, meta, true);
	for (copy = copies; copy != NULL; copy = copy->next)
		if (copy->index_oid == RelationGetRelid(walk->index) &&
			memcmp(&copy->key, &key, sizeof(TsdgNavigatingKey)) == 0)
			break;
	if (copy == NULL)
	{
		TsdgMakeRoom(RelationGetRelid(walk->index), &key, bytes);
		copy = TsdgCopyLayer(walk, &key, meta, true);
	}
	else
		TsdgMakeRoom(RelationGetRelid(walk->index), &key, 0);
	copy->last_used = ++navigating_clock;
	return copy;
}

TsdgLayerSearch *
TsdgLayerSearchOf(TsdgPageWalk *walk, const TsdgMetaPageData *meta)
{
	TsdgNavigatingCopy *copy;
	TsdgNavigatingKey key;

	if (meta->layer_nodes == 0)
		return NULL;
	copy = TsdgLayerCopyOf(walk, meta);
	if (copy != NULL)
		return copy->layer;
	TsdgNavigatingKeyOf(&key, walk->index, meta, true);
	return TsdgCopyLayer(walk, &key, meta, false)->layer;
}

int
TsdgWalkLayer(TsdgPageWalk *walk, TsdgLayerSearch *layer, int ef, uint32 *ids, float *dists,
			  int64 *scored)
{
	int			width = tsdg_layer_entry_count(ef);
	int			count = 0;
	TsdgError	error;

	if (tsdg_layer_search_entries(layer, walk->query, ef, ids, dists, scored, &error) != TSDG_OK)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("tsdg search of the navigating layer failed: %s", error.message)));
	while (count < width && ids[count] != TSDG_INVALID_ID)
		TsdgCheckScanNode(walk->index, ids[count++], walk->node_count);
	return count;
}

/*
 * Offers a search of ef its entries: the layer's walk, or the navigating set
 * scored whole.
 */
void
TsdgOfferNavigatingSet(TsdgPageWalk *walk, TsdgSearch *search, const TsdgMetaPageData *meta, int ef,
					   int64 *layer_scored)
{
	TsdgNavigatingCopy *copy = TsdgLayerCopyOf(walk, meta);

	*layer_scored = 0;
	if (copy != NULL)
	{
		int			width = tsdg_layer_entry_count(ef);
		uint32	   *ids = palloc(sizeof(uint32) * width);
		float	   *dists = palloc(sizeof(float) * width);
		int			count = TsdgWalkLayer(walk, copy->layer, ef, ids, dists, layer_scored);

		tsdg_search_offer_many(search, ids, dists, count);
		pfree(ids);
		pfree(dists);
		return;
	}
	copy = TsdgNavigatingCopyOf(walk, meta);

	if (copy == NULL)
	{
		uint32	   *ids = palloc(sizeof(uint32) * TsdgNavigatingSetMost(meta));
		int			count = TsdgNavigatingIds(meta, ids);

		TsdgWalkOffer(walk, search, ids, count);
		pfree(ids);
		return;
	}
	TsdgScoreCopy(walk, copy);
	tsdg_search_offer_many(search, copy->ids, copy->dists, copy->count);
}

int
TsdgScoreNavigatingSet(TsdgPageWalk *walk, const TsdgMetaPageData *meta, uint32 *ids, float *dists)
{
	TsdgNavigatingCopy *copy = TsdgNavigatingCopyOf(walk, meta);
	int			count;

	if (copy == NULL)
	{
		count = TsdgNavigatingIds(meta, ids);
		TsdgWalkScore(walk, ids, count, dists);
		return count;
	}
	TsdgScoreCopy(walk, copy);
	memcpy(ids, copy->ids, sizeof(uint32) * copy->count);
	memcpy(dists, copy->dists, sizeof(float) * copy->count);
	return copy->count;
}
