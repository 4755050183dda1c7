/*
 * A merge's page writes, in the session that merges: the new graph's region
 * (list, layer and k-NN pages) placed in the spare region or new blocks and written,
 * partly while the GPU worker still computes (the hooks of TsdgMergeSegment),
 * and the rows placed in the row extents. Nothing written here is read by a
 * scan before the switch (tsdgmergeswitch.c).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/rel.h"

#include "tsdgmerge.h"

/* the list pages of the new graph */
BlockNumber
TsdgNewListPages(const TsdgMerge *m)
{
	return TsdgPagesFor(m->arrays.n, m->new_layout.lists_per_page);
}

/*
 * Places the list, layer and k-NN pages of the new graph: in the spare
 * region when it is large enough, else in new blocks at the end of the
 * index, with room to grow. Fills the region fields of m->new_meta and
 * new_layout.
 */
static void
TsdgPlaceRegion(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber layer_end = TsdgListAndLayerPages(&m->arrays);
	BlockNumber used = m->knn_pages_kept ? layer_end : TsdgRegionPages(&m->arrays);
	BlockNumber start;

	if (m->region_placed)
		return;
	m->region_placed = true;
	nm->region_blocks = 0;
	nm->list_start = TSDG_METAPAGE_BLKNO + 1;
	nm->knn_start = InvalidBlockNumber;
	if (used == 0)
		return;

	if (m->meta.spare_start != TSDG_NO_BLOCK && m->meta.spare_blocks >= used)
	{
		nm->region_blocks = m->meta.spare_blocks;
		start = m->meta.spare_start;
	}
	else
	{
		/*
		 * The new blocks are only allocated under the extension lock, and
		 * written after it, so that inserts that need a page do not wait
		 * for the writing.
		 */
		nm->region_blocks = used + used / 2;
		start = TsdgAppendBlocks(m->index, nm->region_blocks);

		/*
		 * The room to grow stays as the extension left it (zero pages, which
		 * every later use of the region overwrites), except its last page:
		 * that one is logged, so that a replay extends the file past the
		 * whole region as the extension did here.
		 */
		if (nm->region_blocks > used)
			TsdgWritePages(m->index, start, nm->region_blocks - 1, nm->region_blocks,
						   TsdgFillRegionPage, &m->arrays);
	}
	nm->list_start = start;
	nm->knn_start = m->knn_pages_kept ? m->meta.knn_start : start + layer_end;
	m->new_layout.list_start = start;
}

/*
 * TsdgMergeSegment's knn_ready: the worker's merged k-NN lists written to
 * their pages while it diversifies.
 */
void
TsdgWriteKnnPages(void *arg)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	TsdgPlaceRegion(m);
	TsdgWritePages(m->index, m->new_meta.list_start, TsdgListAndLayerPages(&m->arrays),
				   TsdgRegionPages(&m->arrays), TsdgFillRegionPage, &m->arrays);
	m->knn_pages_written = true;
}

/*
 * TsdgMergeSegment's lists_ready: the list pages whose lists the worker has
 * written out (the first rows of them), written while it writes the others
 * and links the graph's components (writing list pages is WAL-bound and a
 * large share of a merge's time), by parallel workers and by this session
 * (tsdglistwriters.c). The few lists the linking changes are written again
 * after the answer (TsdgWriteListPagesAgain).
 */
void
TsdgWriteListPagesEarly(void *arg, int64 rows)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	if (rows == 0)
		return;
	if (m->list_writers == NULL)
	{
		/* blocks appended for the region before any writer runs */
		TsdgPlaceRegion(m);
		m->list_writers = TsdgStartListWriters(m->index, m->segment.seg, &m->arrays,
											   m->segment.summary, m->new_meta.list_start);
		m->list_writers_launched = TsdgListWritersLaunched(m->list_writers);
	}
	/* after the answer the session writes its share at once, in TsdgFinishListPages */
	if (!m->segment.answered)
		TsdgListWritersOffer(m->list_writers);
}

/*
 * After the worker's answer: the list pages all written when it merged
 * (every list is published then), else the writers stopped and what they
 * wrote is not this merge's.
 */
void
TsdgFinishListPages(TsdgMerge *m, bool merged)
{
	BlockNumber written;

	if (m->list_writers == NULL)
		return;
	written = TsdgFinishListWriters(m->list_writers, merged, &m->list_pages_at_answer,
									&m->list_pages_early_seconds);
	m->list_writers = NULL;
	m->list_pages_early = merged ? written : 0;
}

/*
 * The first `pages` list pages of the new graph that hold a list marked
 * `flag` in m->changed, written again (after the worker's component linking
 * changed lists already written, or the repair for the unreached rows).
 * Returns how many; *lists_marked, when given, gets the marked lists.
 */
static BlockNumber
TsdgWriteListPagesAgain(TsdgMerge *m, uint8 flag, BlockNumber pages, int64 *lists_marked)
{
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.lists_per_page;
	BlockNumber run_start = InvalidBlockNumber;
	BlockNumber written = 0;

	if (lists_marked != NULL)
		*lists_marked = 0;
	for (BlockNumber page_no = 0; page_no <= pages; page_no++)
	{
		bool		marked = false;

		for (int64 id = (int64) page_no * per_page;
			 page_no < pages && id < Min((int64) (page_no + 1) * per_page, n) &&
			 (lists_marked != NULL || !marked); id++)
		{
			if ((m->changed[id] & flag) == 0)
				continue;
			marked = true;
			if (lists_marked != NULL)
				(*lists_marked)++;
		}
		if (marked && run_start == InvalidBlockNumber)
			run_start = page_no;
		else if (!marked && run_start != InvalidBlockNumber)
		{
			TsdgWritePages(m->index, m->new_meta.list_start, run_start, page_no, TsdgFillRegionPage,
						   &m->arrays);
			written += page_no - run_start;
			run_start = InvalidBlockNumber;
		}
	}
	return written;
}

/*
 * The list pages holding a list that the repair for the unreached rows
 * changed (here or on the worker, TSDG_CHANGED_REPAIR), written again: all
 * list pages were written by then.
 */
void
TsdgWriteRepairedListPages(TsdgMerge *m)
{
	m->list_pages_repaired = TsdgWriteListPagesAgain(m, TSDG_CHANGED_REPAIR, TsdgNewListPages(m),
													 &m->lists_repaired);
}

/*
 * Writes the list pages of the new graph that were not written while the
 * worker wrote its lists out, and those of them the linking changed again,
 * and its k-NN pages unless they were written while the worker diversified
 * or stay as they are. The layer pages wait for the layer
 * (TsdgWriteLayerPages). The spare region's pages past the graph keep what
 * they hold.
 */
void
TsdgWriteRegion(TsdgMerge *m)
{
	const TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber list_pages = TsdgNewListPages(m);

	TsdgPlaceRegion(m);
	if (nm->region_blocks == 0)
		return;
	m->list_pages_relinked = TsdgWriteListPagesAgain(m, TSDG_CHANGED_LINK, m->list_pages_early, NULL);
	TsdgWritePages(m->index, nm->list_start, m->list_pages_early, list_pages, TsdgFillRegionPage,
				   &m->arrays);
	if (!m->knn_pages_written && !m->knn_pages_kept)
		TsdgWritePages(m->index, nm->list_start, TsdgListAndLayerPages(&m->arrays),
					   TsdgRegionPages(&m->arrays), TsdgFillRegionPage, &m->arrays);
}

/*
 * The layer pages of the new graph, after its list pages in the placed
 * region, from the layer's lists; fills the layer fields of m->new_meta.
 */
void
TsdgWriteLayerPages(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;

	nm->layer_nodes = (uint32) tsdg_layer_node_count(m->arrays.n);
	nm->layer_start = TSDG_NO_BLOCK;
	if (nm->layer_nodes == 0)
		return;
	m->arrays.layer_ids = m->layer_ids;
	m->arrays.layer_lambdas = m->layer_lambdas;
	nm->layer_start = nm->list_start + TsdgNewListPages(m);
	TsdgWritePages(m->index, nm->list_start, TsdgNewListPages(m), TsdgListAndLayerPages(&m->arrays),
				   TsdgFillRegionPage, &m->arrays);
}

/*
 * Appends the rows [first, end) to the room of an extent whose rows before
 * first are written: a partly filled page gets them after its records in a
 * GenericXLog record (scans read its first records meanwhile, and none reads
 * past the old node count), the next pages are written whole.
 */
static void
TsdgAppendToExtent(TsdgMerge *m, const TsdgRowExtent *extent, uint32 first, uint32 end)
{
	const TsdgLayout *layout = &m->new_layout;
	int			per_page = layout->rows_per_page;
	uint32		offset = first - extent->first;
	TsdgRowRun	run = {&m->arrays, extent->first, first, end};

	if (first >= end)
		return;
	if (offset % per_page != 0)
	{
		Buffer		buf = ReadBuffer(m->index, extent->start + offset / per_page);
		GenericXLogState *state;
		Page		page;
		uint32		page_end = Min(end, first + (per_page - offset % per_page));

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(m->index);
		page = GenericXLogRegisterBuffer(state, buf, 0);
		/* past the rows of the graph: a merge that crashed may have left some */
		((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) +
			layout->row_size * (offset % per_page);
		TsdgFillRowPage(page, layout, first, page_end, m->tids, m->rows);
		GenericXLogFinish(state);
		UnlockReleaseBuffer(buf);
		first = page_end;
		offset = first - extent->first;
	}
	if (first < end)
		TsdgWritePages(m->index, extent->start, offset / per_page,
					   TsdgPagesFor(end - extent->first, per_page), TsdgFillRowRunPage, &run);
}

/*
 * A new extent for the rows [first, n) and room for half the graph again:
 * in unused row blocks large enough for the rows, else at the end of the
 * index. Only the pages with rows and, at the end, the extent's last page
 * (so that a replay extends the file as far) are written.
 */
static void
TsdgNewExtent(TsdgMerge *m, uint32 first)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.rows_per_page;
	BlockNumber with_rows = TsdgPagesFor(n - first, per_page);
	TsdgRowExtent *extent = &nm->row_extents[nm->row_extent_count++];
	TsdgRowRun	run = {&m->arrays, first, first, (uint32) n};
	int			best = -1;

	for (int i = 0; i < m->unused_row_count; i++)
		if (m->unused_rows[i].blocks >= with_rows &&
			(best < 0 || m->unused_rows[i].blocks < m->unused_rows[best].blocks))
			best = i;
	extent->first = first;
	if (best >= 0)
	{
		extent->start = m->unused_rows[best].start;
		extent->blocks = m->unused_rows[best].blocks;
		m->unused_rows[best] = m->unused_rows[--m->unused_row_count];
		TsdgWritePages(m->index, extent->start, 0, with_rows, TsdgFillRowRunPage, &run);
		return;
	}
	extent->blocks = TsdgPagesFor(Max(n - first, n / 2), per_page);
	extent->start = TsdgAppendBlocks(m->index, extent->blocks);
	TsdgWritePages(m->index, extent->start, 0, with_rows, TsdgFillRowRunPage, &run);
	if (extent->blocks > with_rows)
		TsdgWritePages(m->index, extent->start, extent->blocks - 1, extent->blocks,
					   TsdgFillRowRunPage, &run);
}

/*
 * Places the rows of the merged graph. Old rows never move while the ids
 * stay: the new rows fill the last extent's room, then a new extent. A merge
 * that renumbered (deleted nodes dropped), or whose rows would need more
 * extents than the metapage holds, writes all rows into one new extent and
 * retires the old ones. Of the row blocks no scan reads (the extents the
 * previous merge retired and the spare rows) that no new extent took, the
 * largest stays spare and the others go to the free list. Fills the row
 * fields of m->new_meta and new_layout.
 */
void
TsdgWriteRows(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.rows_per_page;
	bool		renumbered = m->n_old != (int64) m->meta.node_count;
	int			largest = -1;

	nm->row_extent_count = m->meta.row_extent_count;
	memcpy(nm->row_extents, m->meta.row_extents, sizeof(nm->row_extents));
	nm->retired_extent_count = 0;
	m->unused_row_count = 0;
	for (int e = 0; e < m->meta.retired_extent_count; e++)
		if (m->meta.retired_extents[e].blocks > 0)
			m->unused_rows[m->unused_row_count++] = m->meta.retired_extents[e];
	if (m->meta.retired_knn_region.blocks > 0)
		m->unused_rows[m->unused_row_count++] = m->meta.retired_knn_region;
	if (m->meta.spare_rows.blocks > 0)
		m->unused_rows[m->unused_row_count++] = m->meta.spare_rows;
	/* an extent without blocks (an index built empty) holds nothing to keep */
	while (nm->row_extent_count > 0 && nm->row_extents[nm->row_extent_count - 1].blocks == 0)
		nm->row_extent_count--;

	if (!renumbered && nm->row_extent_count > 0)
	{
		TsdgRowExtent *last = &nm->row_extents[nm->row_extent_count - 1];
		int64		room = (int64) last->blocks * per_page - (m->n_old - last->first);
		uint32		placed = (uint32) Min(n, m->n_old + Max(room, 0));

		if (placed >= n || nm->row_extent_count < TSDG_MAX_ROW_EXTENTS)
		{
			TsdgAppendToExtent(m, last, (uint32) m->n_old, placed);
			if (placed < n)
				TsdgNewExtent(m, placed);
			goto placed;
		}
	}

	/* all rows into one new extent */
	for (int e = 0; e < m->meta.row_extent_count; e++)
		if (m->meta.row_extents[e].blocks > 0)
			nm->retired_extents[nm->retired_extent_count++] = m->meta.row_extents[e];
	nm->row_extent_count = 0;
	if (n > 0)
		TsdgNewExtent(m, 0);

placed:
	m->new_layout.extent_count = nm->row_extent_count;
	memcpy(m->new_layout.extents, nm->row_extents, sizeof(nm->row_extents));
	for (int i = 0; i < m->unused_row_count; i++)
		if (largest < 0 || m->unused_rows[i].blocks > m->unused_rows[largest].blocks)
			largest = i;
	memset(&nm->spare_rows, 0, sizeof(nm->spare_rows));
	if (largest >= 0)
	{
		nm->spare_rows = m->unused_rows[largest];
		m->unused_rows[largest] = m->unused_rows[--m->unused_row_count];
	}
}

/*
 * TsdgMergeSegment's while_merging: the rows need no graph, so they are
 * written while the worker merges. A merge that left the old rows to the
 * worker (not read yet) only appends the new ones, which are here.
 */
void
TsdgWriteNewRows(void *arg)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	TsdgWriteRows(m);
	m->rows_written = true;
}
