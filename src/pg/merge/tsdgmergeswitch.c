/*
 * A merge's switch and the page bookkeeping around it, in the session that
 * merges: the previous merge's retired pages made reusable once no scan can
 * read them, the blocks this merge frees prepared for pending pages, and the
 * one metapage record that moves every reader to the new graph.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/rel.h"

#include "tsdgmerge.h"

/*
 * The blocks of the current graph's lists' region: its list pages, its layer
 * pages, and its k-NN pages unless they stayed in a region of their own, at
 * least
 */
static BlockNumber
TsdgRegionBlocks(const TsdgMetaPageData *meta)
{
	BlockNumber blocks;

	if (meta->node_count == 0)
		return meta->region_blocks;
	blocks = TsdgPagesFor(meta->node_count, meta->lists_per_page) +
		TsdgPagesFor(meta->layer_nodes, meta->lists_per_page);
	if (meta->knn_k > 0 && meta->knn_region_start == TSDG_NO_BLOCK)
		blocks += TsdgPagesFor(TsdgStoredKnnNodes(meta), TsdgKnnPerPage(meta->knn_k));
	return Max(blocks, meta->region_blocks);
}

/*
 * The previous merge's retired pages become reusable once no scan that read
 * the metapage before its switch can still run: scans pin the metapage for
 * their whole life, so holding a cleanup lock on it (no other pin) proves
 * it. The retired pending pages go to the free list, the spare region stays
 * spare, now writable. Gives up (returns false) when some other pin stays
 * for a second: a scan still runs, maybe a cursor of this very session.
 */
bool
TsdgReclaimRetired(Relation index)
{
	Buffer		metabuf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	TsdgMetaPage meta;
	Buffer		tailbuf = InvalidBuffer;
	GenericXLogState *state;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	if (!meta->retired_readable)
	{
		UnlockReleaseBuffer(metabuf);
		return true;
	}
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);

	/* inserts pin the metapage for moments: give them a second */
	for (int tries = 0; !ConditionalLockBufferForCleanup(metabuf); tries++)
	{
		if (tries >= 100)
		{
			ReleaseBuffer(metabuf);
			return false;
		}
		pg_usleep(10000L);
		CHECK_FOR_INTERRUPTS();
	}

	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	if (meta->retired_head != TSDG_NO_BLOCK)
	{
		tailbuf = ReadBuffer(index, meta->retired_tail);
		LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	state = GenericXLogStart(index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	if (BufferIsValid(tailbuf))
	{
		Page		tail = GenericXLogRegisterBuffer(state, tailbuf, 0);

		TsdgPageGetOpaque(tail)->next =
			meta->free_head == TSDG_NO_BLOCK ? InvalidBlockNumber : meta->free_head;
		meta->free_head = meta->retired_head;
		meta->retired_head = TSDG_NO_BLOCK;
		meta->retired_tail = TSDG_NO_BLOCK;
	}
	meta->retired_readable = false;
	GenericXLogFinish(state);
	if (BufferIsValid(tailbuf))
		UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
	return true;
}

static int
TsdgCompareExtentsBySize(const void *a, const void *b)
{
	const TsdgRowExtent *x = a;
	const TsdgRowExtent *y = b;

	return (x->blocks < y->blocks) - (x->blocks > y->blocks);
}

/* the empty free-extent slots of the metapage now; inserts only empty more */
static int
TsdgEmptyFreeExtentSlots(Relation index)
{
	TsdgMetaPageData meta;
	int			empty = 0;

	TsdgReadMeta(index, &meta);
	for (int e = 0; e < TSDG_MAX_FREE_EXTENTS; e++)
		empty += meta.free_extents[e].blocks == 0;
	return empty;
}

/*
 * Blocks no scan reads any more, freed for pending pages: the spare region
 * when the new lists did not fit in it, and the unused row blocks
 * TsdgWriteRows left over (the cleanup before this merge proved that no
 * scan of their graph remains). The largest runs become free extents at the
 * switch, as many as the metapage has empty slots for, without a page
 * written; the pages of the others are initialized as free pages linked in
 * order here, and the switch links the last one to the free list.
 */
void
TsdgPrepareFreedPages(TsdgMerge *m, bool free_spare)
{
	TsdgRowExtent ranges[TSDG_MAX_ROW_EXTENTS + 3];
	int			count = 0;
	int			extents;

	if (free_spare)
	{
		ranges[count].start = m->meta.spare_start;
		ranges[count++].blocks = m->meta.spare_blocks;
	}
	for (int i = 0; i < m->unused_row_count; i++)
		ranges[count++] = m->unused_rows[i];

	qsort(ranges, count, sizeof(TsdgRowExtent), TsdgCompareExtentsBySize);
	extents = count > 0 ? Min(count, TsdgEmptyFreeExtentSlots(m->index)) : 0;
	memcpy(m->freed_extents, ranges, sizeof(TsdgRowExtent) * extents);
	m->freed_extent_count = extents;
	count -= extents;
	memmove(ranges, ranges + extents, sizeof(TsdgRowExtent) * count);

	m->freed_first = count > 0 ? ranges[0].start : InvalidBlockNumber;
	m->freed_last = count > 0 ? ranges[count - 1].start + ranges[count - 1].blocks - 1 :
		InvalidBlockNumber;
	for (int r = 0; r < count; r++)
	{
		for (BlockNumber i = 0; i < ranges[r].blocks; i++)
		{
			BlockNumber next = i + 1 < ranges[r].blocks ? ranges[r].start + i + 1 :
				r + 1 < count ? ranges[r + 1].start : InvalidBlockNumber;
			Buffer		buf = ReadBufferExtended(m->index, MAIN_FORKNUM, ranges[r].start + i,
												 RBM_ZERO_AND_LOCK, NULL);
			GenericXLogState *state = GenericXLogStart(m->index);
			Page		page = GenericXLogRegisterBuffer(state, buf, GENERIC_XLOG_FULL_IMAGE);

			TsdgInitPendingPage(page);
			TsdgPageGetOpaque(page)->flags = TSDG_PAGE_FREE;
			TsdgPageGetOpaque(page)->next = next;
			GenericXLogFinish(state);
			UnlockReleaseBuffer(buf);
			if ((i & 63) == 0)
				CHECK_FOR_INTERRUPTS();
		}
	}
}

/*
 * The switch: one GenericXLog record over the metapage moves every reader
 * to the new graph and the rows that stayed pending, retires the old region
 * (or keeps it for its k-NN pages), the consumed pages, the row extents a
 * renumbering left and a k-NN region the new k-NN pages replace, gives the
 * freed pages to the free list, and bumps graph_version.
 */
void
TsdgSwitchGraph(TsdgMerge *m)
{
	Buffer		metabuf = ReadBuffer(m->index, TSDG_METAPAGE_BLKNO);
	Buffer		lastbuf = InvalidBuffer;
	GenericXLogState *state;
	TsdgMetaPage meta;
	const TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber old_region = TsdgRegionBlocks(&m->meta);
	XLogRecPtr	lsn;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	if (BlockNumberIsValid(m->freed_last))
	{
		lastbuf = ReadBuffer(m->index, m->freed_last);
		LockBuffer(lastbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	state = GenericXLogStart(m->index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));

	Assert(meta->graph_version + 1 == nm->graph_version);
	meta->graph_version = nm->graph_version;
	meta->node_count = nm->node_count;
	meta->deleted_count = nm->deleted_count;
	meta->last_merge = nm->last_merge;
	meta->row_size = (uint16) m->new_layout.row_size;
	meta->rows_per_page = (uint16) m->new_layout.rows_per_page;
	meta->list_size = (uint16) m->new_layout.list_size;
	meta->lists_per_page = (uint16) m->new_layout.lists_per_page;
	meta->row_extent_count = nm->row_extent_count;
	memcpy(meta->row_extents, nm->row_extents, sizeof(meta->row_extents));
	meta->retired_extent_count = nm->retired_extent_count;
	memcpy(meta->retired_extents, nm->retired_extents, sizeof(meta->retired_extents));
	meta->spare_rows = nm->spare_rows;
	meta->list_start = nm->list_start;
	meta->layer_nodes = nm->layer_nodes;
	meta->layer_start = nm->layer_start;
	meta->knn_start = nm->knn_start;
	meta->region_blocks = nm->region_blocks;
	meta->knn_k = m->k;
	memset(&meta->retired_knn_region, 0, sizeof(meta->retired_knn_region));
	if (m->knn_pages_kept)
	{
		meta->knn_unstored = nm->node_count - TsdgStoredKnnNodes(&m->meta);
		if (m->meta.knn_region_start == TSDG_NO_BLOCK)
		{
			/* the old region keeps its k-NN pages; no spare region until the next merge */
			meta->knn_region_start = m->meta.list_start;
			meta->knn_region_blocks = old_region;
			old_region = 0;
		}
	}
	else
	{
		meta->knn_unstored = 0;
		if (m->meta.knn_region_start != TSDG_NO_BLOCK)
		{
			meta->retired_knn_region.start = m->meta.knn_region_start;
			meta->retired_knn_region.blocks = m->meta.knn_region_blocks;
		}
		meta->knn_region_start = TSDG_NO_BLOCK;
		meta->knn_region_blocks = 0;
	}
	meta->entry_count = nm->entry_count;
	memcpy(meta->entry_points, nm->entry_points, sizeof(meta->entry_points));
	meta->nn1_bound = nm->nn1_bound;
	meta->unreached_checked = nm->unreached_checked;
	meta->unreached_count = nm->unreached_count;
	memcpy(meta->unreached, nm->unreached, sizeof(uint32) * nm->unreached_count);

	if (BlockNumberIsValid(m->remaining_head))
	{
		meta->pending_head = m->remaining_head;
		meta->pending_count -= m->consumed_rows;
		meta->retired_head = m->consumed_head;
		meta->retired_tail = m->consumed_tail;
	}
	if (BufferIsValid(lastbuf))
	{
		TsdgPageGetOpaque(GenericXLogRegisterBuffer(state, lastbuf, 0))->next =
			meta->free_head == TSDG_NO_BLOCK ? InvalidBlockNumber : meta->free_head;
		meta->free_head = m->freed_first;
	}
	/* slots only empty meanwhile (inserts use them up): all of them fit */
	for (int i = 0, e = 0; i < m->freed_extent_count; i++, e++)
	{
		while (e < TSDG_MAX_FREE_EXTENTS && meta->free_extents[e].blocks > 0)
			e++;
		if (e == TSDG_MAX_FREE_EXTENTS)
			elog(ERROR, "tsdg index \"%s\" has no free extent slot left for a merge",
				 RelationGetRelationName(m->index));
		meta->free_extents[e] = m->freed_extents[i];
	}

	/* the old region becomes the spare one, once no scan reads it */
	meta->spare_start = old_region > 0 ? m->meta.list_start : TSDG_NO_BLOCK;
	meta->spare_blocks = old_region;
	meta->retired_readable = true;
	meta->merge_count++;
	lsn = GenericXLogFinish(state);
	if (BufferIsValid(lastbuf))
		UnlockReleaseBuffer(lastbuf);
	UnlockReleaseBuffer(metabuf);

	/*
	 * A merge assigns no transaction id, so its commit would not flush the
	 * WAL: flush it here, so that a merge that returned survives a crash.
	 */
	if (RelationNeedsWAL(m->index))
		XLogFlush(lsn);
}
