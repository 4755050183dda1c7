/*
 * The pages of CREATE INDEX: the row pages in the blocks after the
 * metapage, then the region of the list pages, the layer pages and the k-NN
 * pages, each WAL-logged as whole pages as they are filled. A build on the
 * GPU worker writes them as the worker's segment gets them (the segment's
 * hooks): the row pages once the heap is scanned, the k-NN pages once its
 * k-NN lists are final, the list pages once its search lists are out and
 * again where its check or the rings of identical rows changed them, the
 * layer pages once its summary is in; a build on the CPU or in parts writes
 * them after the graph.
 */
#include "postgres.h"

#include "commands/progress.h"
#include "pgstat.h"
#include "utils/timestamp.h"

#include "tsdgbuild.h"

/* a row page of a build, and the build's progress */
static void
TsdgFillBuildRowPage(void *arg, Page page, BlockNumber page_no)
{
	const TsdgRowRun *run = arg;
	int64		per_page = run->arrays->layout->rows_per_page;

	TsdgFillRowRunPage(arg, page, page_no);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE,
								 Min((page_no + 1) * per_page, run->arrays->n));
}

/*
 * The row pages, in the blocks after the metapage (logged as they are
 * written), and the groups of identical rows, found on threads meanwhile:
 * the worker's build calls it while it waits (neither needs the graph), the
 * others write the row pages before the region.
 */
void
TsdgWriteBuildRows(void *arg)
{
	TsdgBuildState *bs = (TsdgBuildState *) arg;
	TsdgGraphArrays arrays = {bs->layout, bs->count, bs->tids, bs->rows, NULL, NULL, NULL, 0};
	TsdgRowRun	rows = {&arrays, 0, 0, (uint32) bs->count};
	BlockNumber row_pages = bs->meta->row_extents[0].blocks;
	TimestampTz start = GetCurrentTimestamp();
	BlockNumber first = TsdgAppendBlocks(bs->index, row_pages);

	Assert(first == bs->meta->row_extents[0].start);
	TsdgStartBuildDuplicates(bs);
	TsdgWritePages(bs->index, first, 0, row_pages, TsdgFillRowRunPage, &rows);
	bs->rows_written = true;
	bs->rows_seconds = SECS(start, GetCurrentTimestamp());
	TsdgFindBuildDuplicates(bs);
}

/*
 * The blocks of the region after the row pages: the list pages, the layer
 * pages, then the k-NN pages at knn_start, which are written first when the
 * worker's lists are ready before its graph.
 */
static void
TsdgPlaceBuildRegion(TsdgBuildState *bs, const TsdgGraphArrays *arrays)
{
	BlockNumber first PG_USED_FOR_ASSERTS_ONLY;

	if (bs->region_placed)
		return;
	first = TsdgAppendBlocks(bs->index, TsdgRegionPages(arrays));
	Assert(first == bs->meta->list_start);
	bs->region_placed = true;
}

/*
 * The segment's knn_ready: the k-NN pages of the worker's final lists,
 * written while it diversifies, links and checks the graph.
 */
void
TsdgWriteBuildKnn(void *arg)
{
	TsdgBuildState *bs = (TsdgBuildState *) arg;
	TsdgGraphArrays arrays = {bs->layout, bs->count, bs->tids, bs->rows, NULL, NULL,
	bs->knn_ids, bs->params.build_k};
	TimestampTz start = GetCurrentTimestamp();

	TsdgPlaceBuildRegion(bs, &arrays);
	TsdgWritePages(bs->index, bs->meta->list_start, TsdgListAndLayerPages(&arrays),
				   TsdgRegionPages(&arrays), TsdgFillRegionPage, &arrays);
	bs->knn_written = true;
	bs->knn_seconds = SECS(start, GetCurrentTimestamp());
}

/*
 * The segment's lists_ready: the list pages whose lists are all among the
 * first rows the worker has put in the segment, written while it checks the
 * graph (the lists the check changes are written again after its answer).
 */
void
TsdgWriteBuildLists(void *arg, int64 rows)
{
	TsdgBuildState *bs = (TsdgBuildState *) arg;
	TsdgGraphArrays arrays = {bs->layout, bs->count, bs->tids, bs->rows, bs->segment.neighbors,
	bs->segment.lambdas, bs->knn_ids, bs->params.build_k};
	BlockNumber ready = rows >= bs->count ? TsdgPagesFor(bs->count, bs->layout->lists_per_page) :
		(BlockNumber) (rows / bs->layout->lists_per_page);
	TimestampTz start = GetCurrentTimestamp();

	if (ready <= bs->list_pages_written)
		return;
	TsdgPlaceBuildRegion(bs, &arrays);
	TsdgWritePages(bs->index, bs->meta->list_start, bs->list_pages_written, ready,
				   TsdgFillRegionPage, &arrays);
	bs->list_pages_written = ready;
	bs->lists_seconds += SECS(start, GetCurrentTimestamp());
}

/* the pages of the region a run between two calls of between_list_pages holds */
#define TSDG_LIST_PAGES_RUN		1024

static void
TsdgBetweenListPages(TsdgBuildState *bs)
{
	if (bs->between_list_pages != NULL)
		bs->between_list_pages(bs->between_arg);
}

/* the pages [first, end) of the region, in runs with between_list_pages after each */
static void
TsdgWriteRegionRuns(TsdgBuildState *bs, const TsdgGraphArrays *arrays, BlockNumber first,
					BlockNumber end)
{
	for (BlockNumber run = first; run < end; run += TSDG_LIST_PAGES_RUN)
	{
		TsdgWritePages(bs->index, bs->meta->list_start, run, Min(end, run + TSDG_LIST_PAGES_RUN),
					   TsdgFillRegionPage, (void *) arrays);
		TsdgBetweenListPages(bs);
	}
}

/* whether a list on list page `page` is marked in changed */
static bool
TsdgListPageChanged(const TsdgBuildState *bs, const uint8 *changed, BlockNumber page)
{
	int64		first = (int64) page * bs->layout->lists_per_page;
	int64		end = Min(first + bs->layout->lists_per_page, bs->count);

	for (int64 id = first; id < end; id++)
		if (changed[id] != 0)
			return true;
	return false;
}

/*
 * Of the list pages written while the worker checked the graph, those that
 * hold a list changed since, written again: by the check (changed) or by the
 * rings of identical rows, linked after the answer. Returns how many.
 */
static BlockNumber
TsdgWriteChangedListPages(TsdgBuildState *bs, const TsdgGraphArrays *arrays)
{
	uint8	   *changed = bs->segment.changed;
	BlockNumber written = bs->list_pages_written;
	BlockNumber rewritten = 0;
	BlockNumber run_start = InvalidBlockNumber;

	for (int64 i = 0; bs->duplicates != NULL && i < bs->duplicates->rows; i++)
		changed[bs->duplicates->ids[i]] |= TSDG_CHANGED_LINK;
	/* runs of such pages, each written as one run */
	for (BlockNumber page = 0; page <= written; page++)
	{
		bool		again = page < written && TsdgListPageChanged(bs, changed, page);

		if (again && run_start == InvalidBlockNumber)
			run_start = page;
		else if (!again && run_start != InvalidBlockNumber)
		{
			TsdgWriteRegionRuns(bs, arrays, run_start, page);
			rewritten += page - run_start;
			run_start = InvalidBlockNumber;
		}
	}
	return rewritten;
}

/*
 * The row pages unless written, then the region of the list pages and, when
 * the builder returned them, the k-NN pages, each unless written, and the
 * list pages written before a list on them changed (each logged as it is
 * written). The layer pages between them wait for the layer
 * (TsdgWriteBuildLayer). Sets knn_start and knn_k in meta.
 */
void
TsdgWriteGraphPages(TsdgBuildState *bs, TsdgMetaPageData *meta, const TsdgLayout *layout,
					const uint32 *neighbors, const uint8 *lambdas, bool with_knn)
{
	TsdgGraphArrays arrays = {layout, bs->count, bs->tids, bs->rows, neighbors, lambdas,
	with_knn ? bs->knn_ids : NULL, bs->params.build_k};
	TsdgRowRun	rows = {&arrays, 0, 0, (uint32) bs->count};
	BlockNumber row_pages = meta->row_extents[0].blocks;
	BlockNumber first;

	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, TSDG_PROGRESS_WRITE);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, bs->count);
	if (!bs->rows_written)
	{
		first = TsdgAppendBlocks(bs->index, row_pages);
		Assert(first == meta->row_extents[0].start);
		TsdgWritePages(bs->index, first, 0, row_pages, TsdgFillBuildRowPage, &rows);
	}
	TsdgPlaceBuildRegion(bs, &arrays);
	if (bs->list_pages_written > 0)
		bs->list_pages_after = TsdgWriteChangedListPages(bs, &arrays);
	bs->list_pages_after += TsdgPagesFor(bs->count, layout->lists_per_page) - bs->list_pages_written;
	TsdgWriteRegionRuns(bs, &arrays, bs->list_pages_written, TsdgListPages(&arrays));
	if (!bs->knn_written)
		TsdgWriteRegionRuns(bs, &arrays, TsdgListAndLayerPages(&arrays), TsdgRegionPages(&arrays));
	if (with_knn)
	{
		meta->knn_k = bs->params.build_k;
		meta->knn_start = meta->list_start + TsdgListAndLayerPages(&arrays);
	}
}

/*
 * The layer pages, in the region's blocks after the list pages, from the
 * layer's lists; sets the layer fields of meta.
 */
void
TsdgWriteBuildLayer(TsdgBuildState *bs, TsdgMetaPageData *meta, const TsdgLayout *layout)
{
	TsdgGraphArrays arrays = {layout, bs->count, NULL, NULL, NULL, NULL, NULL, 0,
	bs->layer_ids, bs->layer_lambdas};

	meta->layer_nodes = (uint32) tsdg_layer_node_count(bs->count);
	if (meta->layer_nodes == 0)
		return;
	meta->layer_start = meta->list_start + TsdgListPages(&arrays);
	TsdgWritePages(bs->index, meta->list_start, TsdgListPages(&arrays),
				   TsdgListAndLayerPages(&arrays), TsdgFillRegionPage, &arrays);
}

