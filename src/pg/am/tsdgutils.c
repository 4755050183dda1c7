/*
 * tsdg page layout: record sizes, where node i lives, page initialization
 * and metapage access.
 */
#include "postgres.h"

#include <math.h>

#include "access/relation.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/rel.h"

#include "tsdg.h"

/* room for records on a row, list or k-NN page: everything after the page header */
#define TSDG_RECORD_PAGE_SPACE	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData))
#define TSDG_PENDING_PAGE_SPACE \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(TsdgPageOpaqueData)))

/* the next record's vector must stay float-aligned */
static Size
TsdgRowSize(int dims)
{
	return TYPEALIGN(sizeof(float), sizeof(TsdgNodeHeader) + sizeof(float) * dims);
}

/* 3-byte ids leave 0xFFFFFF for TSDG_INVALID_ID */
#define TSDG_SHORT_ID_NONE		0xFFFFFF

/* bytes per neighbor id in the list records of a graph of this many nodes */
int
TsdgListIdBytes(int64 nodes)
{
	return nodes < TSDG_SHORT_ID_NONE ? 3 : (int) sizeof(uint32);
}

static Size
TsdgListSize(int degree, int id_bytes)
{
	return TYPEALIGN(sizeof(uint32), (id_bytes + sizeof(uint8)) * degree);
}

/* a row record and a pending record (the smaller page: it has special space) fit one page */
int
TsdgMaxDimensions(void)
{
	return (int) ((Min(TSDG_RECORD_PAGE_SPACE - sizeof(TsdgNodeHeader),
					   TSDG_PENDING_PAGE_SPACE - sizeof(TsdgPendingHeader))) / sizeof(float));
}

void
TsdgCheckDimensions(Relation index, int dims)
{
	int			max_dims = TsdgMaxDimensions();

	if (dims < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension for tsdg index \"%s\"",
						RelationGetRelationName(index))));
	if (dims > max_dims)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("column cannot have more than %d dimensions for tsdg index \"%s\"",
						max_dims, RelationGetRelationName(index)),
				 errdetail("The vector has %d dimensions.", dims),
				 errhint("A row must fit in one %d-byte page.", BLCKSZ)));
}

/* the record shapes of a graph of this many nodes; the caller places the rows and lists */
void
TsdgInitLayout(TsdgLayout *layout, int dims, int degree, int64 nodes)
{
	MemSet(layout, 0, sizeof(TsdgLayout));
	layout->dims = dims;
	layout->degree = degree;
	layout->row_size = TsdgRowSize(dims);
	layout->rows_per_page = (int) (TSDG_RECORD_PAGE_SPACE / layout->row_size);
	layout->list_id_bytes = TsdgListIdBytes(nodes);
	layout->list_size = TsdgListSize(degree, layout->list_id_bytes);
	layout->lists_per_page = (int) (TSDG_RECORD_PAGE_SPACE / layout->list_size);
	layout->list_start = InvalidBlockNumber;
	layout->pending_size = TYPEALIGN(sizeof(float),
									 sizeof(TsdgPendingHeader) + sizeof(float) * dims);
	layout->pending_per_page = (int) (TSDG_PENDING_PAGE_SPACE / layout->pending_size);
}

void
TsdgLayoutFromMeta(TsdgLayout *layout, const TsdgMetaPageData *meta)
{
	TsdgInitLayout(layout, meta->dims, meta->degree, meta->node_count);
	if (meta->node_count > 0 &&
		(layout->row_size != meta->row_size || layout->rows_per_page != meta->rows_per_page ||
		 layout->list_size != meta->list_size || layout->lists_per_page != meta->lists_per_page ||
		 meta->row_extent_count < 1 || meta->row_extent_count > TSDG_MAX_ROW_EXTENTS))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("tsdg metapage describes %u-byte rows (%d per page) and %u-byte lists (%d per page) in %d extents, but %d dimensions and degree %d give %zu (%d) and %zu (%d)",
						meta->row_size, meta->rows_per_page, meta->list_size, meta->lists_per_page,
						meta->row_extent_count, meta->dims, meta->degree,
						layout->row_size, layout->rows_per_page,
						layout->list_size, layout->lists_per_page)));
	layout->list_start = meta->list_start;
	layout->extent_count = meta->row_extent_count;
	memcpy(layout->extents, meta->row_extents, sizeof(layout->extents));
}

/* the extent of node id: the last one whose first row is not past it */
static const TsdgRowExtent *
TsdgRowExtentOf(const TsdgLayout *layout, uint32 id)
{
	int			e = layout->extent_count - 1;

	while (e > 0 && layout->extents[e].first > id)
		e--;
	return &layout->extents[e];
}

BlockNumber
TsdgRowBlock(const TsdgLayout *layout, uint32 id)
{
	const TsdgRowExtent *extent = TsdgRowExtentOf(layout, id);

	return extent->start + (id - extent->first) / layout->rows_per_page;
}

char *
TsdgRowRecord(const TsdgLayout *layout, Page page, uint32 id)
{
	const TsdgRowExtent *extent = TsdgRowExtentOf(layout, id);

	return PageGetContents(page) + layout->row_size * ((id - extent->first) % layout->rows_per_page);
}

/* one past the last node before limit whose row shares the page of id's */
uint32
TsdgRowPageEnd(const TsdgLayout *layout, uint32 id, uint32 limit)
{
	const TsdgRowExtent *extent = TsdgRowExtentOf(layout, id);
	int64		end = extent->first +
		((int64) (id - extent->first) / layout->rows_per_page + 1) * layout->rows_per_page;

	if (extent < &layout->extents[layout->extent_count - 1])
		end = Min(end, (extent + 1)->first);
	return (uint32) Min(end, (int64) limit);
}

BlockNumber
TsdgListBlock(const TsdgLayout *layout, uint32 id)
{
	return layout->list_start + id / layout->lists_per_page;
}

char *
TsdgListRecord(const TsdgLayout *layout, Page page, uint32 id)
{
	return PageGetContents(page) + layout->list_size * (id % layout->lists_per_page);
}

/*
 * The first count list records of the lists starting at layout->list_start
 * (the graph's, or the layer's with its start there), degree ids and lambdas
 * each, read page by page.
 */
void
TsdgReadListRecords(Relation index, const TsdgLayout *layout, uint32 count, uint32 *neighbors,
					uint8 *lambdas)
{
	for (uint32 id = 0; id < count;)
	{
		Buffer		buf = ReadBuffer(index, TsdgListBlock(layout, id));
		uint32		end = Min(id + layout->lists_per_page, count);
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (TsdgPageRecordCount(page, layout->list_size) < (int) (end - id))
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("tsdg index \"%s\" has a list page with too few lists (block %u)",
							RelationGetRelationName(index), BufferGetBlockNumber(buf))));
		for (; id < end; id++)
			TsdgListRead(layout, TsdgListRecord(layout, page, id), neighbors + (Size) id * layout->degree,
						 lambdas + (Size) id * layout->degree);
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/* A list record's neighbor ids (TSDG_INVALID_ID padded) and their lambdas, R each. */
void
TsdgListRead(const TsdgLayout *layout, const char *rec, uint32 *neighbors, uint8 *lambdas)
{
	int			degree = layout->degree;
	const uint8 *ids = (const uint8 *) rec;

	if (layout->list_id_bytes == sizeof(uint32))
		memcpy(neighbors, ids, sizeof(uint32) * degree);
	else
		for (int j = 0; j < degree; j++, ids += 3)
		{
			uint32		id = ids[0] | ((uint32) ids[1] << 8) | ((uint32) ids[2] << 16);

			neighbors[j] = id == TSDG_SHORT_ID_NONE ? TSDG_INVALID_ID : id;
		}
	memcpy(lambdas, rec + layout->list_id_bytes * degree, degree);
}

static void
TsdgListWrite(const TsdgLayout *layout, char *rec, const uint32 *neighbors, const uint8 *lambdas)
{
	int			degree = layout->degree;
	uint8	   *ids = (uint8 *) rec;

	if (layout->list_id_bytes == sizeof(uint32))
		memcpy(ids, neighbors, sizeof(uint32) * degree);
	else
		for (int j = 0; j < degree; j++, ids += 3)
		{
			uint32		id = neighbors[j] == TSDG_INVALID_ID ? TSDG_SHORT_ID_NONE : neighbors[j];

			Assert(id <= TSDG_SHORT_ID_NONE);
			ids[0] = (uint8) id;
			ids[1] = (uint8) (id >> 8);
			ids[2] = (uint8) (id >> 16);
		}
	memcpy(rec + layout->list_id_bytes * degree, lambdas, degree);
}

BlockNumber
TsdgPagesFor(int64 records, int per_page)
{
	return (BlockNumber) ((records + per_page - 1) / per_page);
}

int
TsdgKnnPerPage(int k)
{
	return (int) (TSDG_RECORD_PAGE_SPACE / (sizeof(uint32) * k));
}

/*
 * Room for a zeroed record of size bytes after the records of a record page.
 * A layout computed from a bad dimension count or degree must never write
 * past the page into the shared buffer next to it, so this is checked in
 * every build, not only with assertions.
 */
static char *
TsdgAppendRecord(Page page, Size size)
{
	Size		lower = ((PageHeader) page)->pd_lower;
	Size		limit = ((PageHeader) page)->pd_special;
	char	   *rec;

	if (lower < MAXALIGN(SizeOfPageHeaderData) || limit > BLCKSZ || lower > limit ||
		size > limit - lower)
		elog(ERROR, "tsdg record of %zu bytes does not fit a page filled to %zu bytes",
			 size, lower);
	rec = (char *) page + lower;
	MemSet(rec, 0, size);
	((PageHeader) page)->pd_lower += size;
	return rec;
}

/*
 * Appends the rows [first, end) (indexes of tids and rows) to a row page,
 * after the records it holds.
 */
void
TsdgFillRowPage(Page page, const TsdgLayout *layout, uint32 first, uint32 end,
				const ItemPointerData *tids, const float *rows)
{
	Assert(layout->row_size >= sizeof(TsdgNodeHeader) + sizeof(float) * layout->dims);
	for (uint32 id = first; id < end; id++)
	{
		char	   *rec = TsdgAppendRecord(page, layout->row_size);

		((TsdgNodeHeader *) rec)->heaptid = tids[id];
		memcpy(TsdgRecordVector(rec), rows + (Size) id * layout->dims, sizeof(float) * layout->dims);
	}
}

/* Fills a fresh list page with the lists [first, end). */
static void
TsdgFillListPage(Page page, const TsdgLayout *layout, uint32 first, uint32 end,
				 const uint32 *neighbors, const uint8 *lambdas)
{
	int			degree = layout->degree;

	TsdgInitRecordPage(page);
	for (uint32 id = first; id < end; id++)
	{
		char	   *rec = TsdgAppendRecord(page, layout->list_size);

		TsdgListWrite(layout, rec, neighbors + (Size) id * degree, lambdas + (Size) id * degree);
	}
}

/* Fills a fresh k-NN page with the lists [first, end). */
static void
TsdgFillKnnPage(Page page, const uint32 *knn_ids, int64 first, int64 end, int k)
{
	Size		size = sizeof(uint32) * k * (end - first);

	TsdgInitRecordPage(page);
	memcpy(TsdgAppendRecord(page, size), knn_ids + first * k, size);
}

/* Fills a page of an extent with the run's rows that belong on it (none past the run). */
void
TsdgFillRowRunPage(void *arg, Page page, BlockNumber page_no)
{
	const TsdgRowRun *run = arg;
	const TsdgGraphArrays *a = run->arrays;
	int			per_page = a->layout->rows_per_page;
	int64		first = Max((int64) run->extent_first + (int64) page_no * per_page, (int64) run->first);
	int64		end = Min((int64) run->extent_first + (int64) (page_no + 1) * per_page, (int64) run->end);

	TsdgInitRecordPage(page);
	if (first < end)
		TsdgFillRowPage(page, a->layout, (uint32) first, (uint32) end, a->tids, a->rows);
}

BlockNumber
TsdgListPages(const TsdgGraphArrays *arrays)
{
	return TsdgPagesFor(arrays->n, arrays->layout->lists_per_page);
}

BlockNumber
TsdgListAndLayerPages(const TsdgGraphArrays *arrays)
{
	return TsdgListPages(arrays) +
		TsdgPagesFor(tsdg_layer_node_count(arrays->n), arrays->layout->lists_per_page);
}

BlockNumber
TsdgRegionPages(const TsdgGraphArrays *arrays)
{
	BlockNumber pages = TsdgListAndLayerPages(arrays);

	if (arrays->knn_ids != NULL)
		pages += TsdgPagesFor(arrays->n, TsdgKnnPerPage(arrays->knn_k));
	return arrays->n == 0 ? 0 : pages;
}

/*
 * Fills page page_no of a region: list pages, layer pages, then k-NN pages,
 * then empty pages (room to grow).
 */
void
TsdgFillRegionPage(void *arg, Page page, BlockNumber page_no)
{
	const TsdgGraphArrays *a = arg;
	const TsdgLayout *layout = a->layout;
	BlockNumber list_pages = TsdgListPages(a);
	BlockNumber layer_end = TsdgListAndLayerPages(a);

	if (page_no < list_pages)
	{
		int64		first = (int64) page_no * layout->lists_per_page;

		TsdgFillListPage(page, layout, (uint32) first,
						 (uint32) Min(first + layout->lists_per_page, a->n), a->neighbors, a->lambdas);
	}
	else if (page_no < layer_end)
	{
		int64		first = (int64) (page_no - list_pages) * layout->lists_per_page;

		if (a->layer_ids == NULL)
			elog(ERROR, "tsdg layer page written before the layer was computed");
		TsdgFillListPage(page, layout, (uint32) first,
						 (uint32) Min(first + layout->lists_per_page, tsdg_layer_node_count(a->n)),
						 a->layer_ids, a->layer_lambdas);
	}
	else if (page_no < TsdgRegionPages(a))
	{
		int			per_page = TsdgKnnPerPage(a->knn_k);
		int64		first = (int64) (page_no - layer_end) * per_page;

		TsdgFillKnnPage(page, a->knn_ids, first, Min(first + per_page, a->n), a->knn_k);
	}
	else
		TsdgInitRecordPage(page);
}

/* records of a page whose records are packed from the contents to pd_lower */
int
TsdgPageRecordCount(Page page, Size record_size)
{
	return (int) ((((PageHeader) page)->pd_lower - MAXALIGN(SizeOfPageHeaderData)) / record_size);
}

void
TsdgNodeResultsToTids(const uint32 *ids, const float *dists, int nq, int wide_k, int k,
					  uint32 node_count, const ItemPointerData *node_tids,
					  const uint8 *node_flags, ItemPointerData *out_tids, float *out_dists)
{
	for (int q = 0; q < nq; q++)
	{
		int			written = 0;

		for (int j = 0; j < wide_k && written < k; j++)
		{
			uint32		id = ids[(Size) q * wide_k + j];

			if (id == TSDG_INVALID_ID || id >= node_count)
				break;
			if (node_flags != NULL && (node_flags[id] & TSDG_NODE_DELETED))
				continue;
			out_tids[(Size) q * k + written] = node_tids[id];
			out_dists[(Size) q * k + written] = dists[(Size) q * wide_k + j];
			written++;
		}
		for (; written < k; written++)
		{
			ItemPointerSetInvalid(&out_tids[(Size) q * k + written]);
			out_dists[(Size) q * k + written] = INFINITY;
		}
	}
}

int
TsdgCompareNodeIds(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a;
	uint32		y = *(const uint32 *) b;

	return (x > y) - (x < y);
}

int
TsdgCompareCandidates(const void *a, const void *b)
{
	const TsdgCandidate *x = a;
	const TsdgCandidate *y = b;

	if (x->distance != y->distance)
		return x->distance < y->distance ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

void
TsdgMergeExactHits(int k, void *keys, float *dists, Size key_size, const void *missing_key,
				   const void *hit_keys, const float *hit_dists, int hits, void *scratch_keys,
				   float *scratch_dists)
{
	char	   *results = keys;
	const char *hit = hit_keys;
	char	   *out_keys = scratch_keys;
	int			count = 0,
				g = 0,
				h = 0,
				out = 0;

	while (count < k && !isinf(dists[count]))
		count++;
	while (out < k)
	{
		if (h < hits && !isinf(hit_dists[h]) && (g >= count || hit_dists[h] < dists[g]))
		{
			bool		found = false;

			for (int i = 0; i < count && !found; i++)
				found = memcmp(results + i * key_size, hit + h * key_size, key_size) == 0;
			if (!found)
			{
				memcpy(out_keys + out * key_size, hit + h * key_size, key_size);
				scratch_dists[out++] = hit_dists[h];
			}
			h++;
		}
		else if (g < count)
		{
			memcpy(out_keys + out * key_size, results + g * key_size, key_size);
			scratch_dists[out++] = dists[g++];
		}
		else
			break;
	}
	memcpy(results, out_keys, out * key_size);
	memcpy(dists, scratch_dists, sizeof(float) * out);
	for (; out < k; out++)
	{
		memcpy(results + out * key_size, missing_key, key_size);
		dists[out] = INFINITY;
	}
}

/*
 * Appends count blocks to the index with one write of the last (under the
 * extension lock) and returns the first: the blocks before it are a hole in
 * the file, which reads as zeroes, so a page written into it costs no write
 * of a zeroed block first (as P_NEW does per page).
 */
BlockNumber
TsdgAppendBlocks(Relation index, BlockNumber count)
{
	PGAlignedBlock zero;
	bool		need_lock = !RELATION_IS_LOCAL(index);
	BlockNumber first;

	memset(zero.data, 0, BLCKSZ);
	if (need_lock)
		LockRelationForExtension(index, ExclusiveLock);
	first = RelationGetNumberOfBlocks(index);
	if (count > 0)
		smgrextend(RelationGetSmgr(index), MAIN_FORKNUM, first + count - 1, zero.data, false);
	if (need_lock)
		UnlockRelationForExtension(index, ExclusiveLock);
	return first;
}

/*
 * Marks filled, locked pages dirty, WAL-logs them as one record of full
 * pages (up to XLR_MAX_BLOCK_ID), releases them.
 */
static void
TsdgLogPages(Buffer *buffers, int count, bool wal)
{
	XLogRecPtr	recptr;

	if (wal)
		XLogBeginInsert();
	START_CRIT_SECTION();
	for (int i = 0; i < count; i++)
	{
		MarkBufferDirty(buffers[i]);
		if (wal)
			XLogRegisterBuffer(i, buffers[i], REGBUF_FORCE_IMAGE | REGBUF_STANDARD);
	}
	if (wal)
	{
		recptr = XLogInsert(RM_XLOG_ID, XLOG_FPI);
		for (int i = 0; i < count; i++)
			PageSetLSN(BufferGetPage(buffers[i]), recptr);
	}
	END_CRIT_SECTION();
	for (int i = 0; i < count; i++)
		UnlockReleaseBuffer(buffers[i]);

	/*
	 * Wakes the WAL writer to write and flush up to here as an asynchronous
	 * commit does. A merge's list pages are a large stream of WAL: left
	 * to them, the writers stall on each WAL buffer they need written and on
	 * each segment's fsync, or the merge's final flush does it all at once.
	 */
	if (wal)
		XLogSetAsyncXactLSN(recptr);
}

/*
 * Writes pages [first, end) of a run of blocks that exist from start on,
 * whatever they held: fill(arg, page, page_no) fills each zeroed page in its
 * locked buffer, and the pages are WAL-logged XLR_MAX_BLOCK_ID at a time as
 * full images, as CREATE INDEX logs its own (log_newpage_range's record,
 * without reading the pages back).
 */
void
TsdgWritePages(Relation index, BlockNumber start, BlockNumber first, BlockNumber end,
			   TsdgPageFiller fill, void *arg)
{
	bool		wal = RelationNeedsWAL(index);
	Buffer		batch[XLR_MAX_BLOCK_ID];
	int			batched = 0;

	if (wal && end > first)
		XLogEnsureRecordSpace(XLR_MAX_BLOCK_ID - 1, 0);
	for (BlockNumber page_no = first; page_no < end; page_no++)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, start + page_no,
											 RBM_ZERO_AND_LOCK, NULL);

		fill(arg, BufferGetPage(buf), page_no);
		batch[batched++] = buf;
		if (batched == XLR_MAX_BLOCK_ID || page_no == end - 1)
		{
			TsdgLogPages(batch, batched, wal);
			batched = 0;
			CHECK_FOR_INTERRUPTS();
		}
	}
}

void
TsdgInitRecordPage(Page page)
{
	PageInit(page, BLCKSZ, 0);
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData);
}

void
TsdgInitPendingPage(Page page)
{
	TsdgPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(TsdgPageOpaqueData));
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData);
	opaque = TsdgPageGetOpaque(page);
	opaque->next = InvalidBlockNumber;
	opaque->flags = TSDG_PAGE_PENDING;
	opaque->page_id = TSDG_PAGE_ID;
}

/*
 * pd_lower past the metadata, so that WAL records keep all of it: a metapage
 * written before the metadata grew ends earlier (its hole is not logged).
 */
void
TsdgCoverMeta(Page page)
{
	LocationIndex end = ((char *) TsdgPageGetMeta(page) + sizeof(TsdgMetaPageData)) - (char *) page;

	if (((PageHeader) page)->pd_lower < end)
		((PageHeader) page)->pd_lower = end;
}

void
TsdgInitMetaPage(Page page, const TsdgMetaPageData *meta)
{
	TsdgPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(TsdgPageOpaqueData));
	memcpy(TsdgPageGetMeta(page), meta, sizeof(TsdgMetaPageData));
	TsdgCoverMeta(page);
	opaque = TsdgPageGetOpaque(page);
	opaque->next = InvalidBlockNumber;
	opaque->flags = TSDG_PAGE_META;
	opaque->page_id = TSDG_PAGE_ID;
}

void
TsdgReadMeta(Relation index, TsdgMetaPageData *meta)
{
	Buffer		buf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	TsdgMetaPage stored;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	stored = TsdgPageGetMeta(BufferGetPage(buf));
	if (stored->magic != TSDG_MAGIC_NUMBER)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" is not a tsdg index", RelationGetRelationName(index))));
	if (stored->version != TSDG_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("tsdg index \"%s\" has format version %u, this build reads version %d",
						RelationGetRelationName(index), stored->version, TSDG_FORMAT_VERSION),
				 errhint("REINDEX the index.")));
	memcpy(meta, stored, sizeof(TsdgMetaPageData));
	UnlockReleaseBuffer(buf);
}

/* A new page at the end of the relation, pinned and exclusively locked. */
Buffer
TsdgNewBuffer(Relation index, ForkNumber fork)
{
	Buffer		buf;
	bool		need_lock = !RELATION_IS_LOCAL(index);

	if (need_lock)
		LockRelationForExtension(index, ExclusiveLock);
	buf = ReadBufferExtended(index, fork, P_NEW, RBM_NORMAL, NULL);
	if (need_lock)
		UnlockRelationForExtension(index, ExclusiveLock);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	return buf;
}

const char *
TsdgMetricName(int32 metric)
{
	switch (metric)
	{
		case TSDG_METRIC_L2:
			return "l2";
		case TSDG_METRIC_INNER_PRODUCT:
			return "inner_product";
		case TSDG_METRIC_COSINE:
			return "cosine";
		case TSDG_METRIC_L1:
			return "l1";
		default:
			return "unknown";
	}
}

TsdgMetric
TsdgIndexMetric(Relation index)
{
	FmgrInfo   *proc = index_getprocinfo(index, 1, TSDG_METRIC_PROC);
	int32		metric = DatumGetInt32(FunctionCall0Coll(proc, InvalidOid));

	if (metric != TSDG_METRIC_L2 && metric != TSDG_METRIC_INNER_PRODUCT &&
		metric != TSDG_METRIC_COSINE && metric != TSDG_METRIC_L1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("tsdg operator class support function 1 returned unknown metric %d", metric)));
	return (TsdgMetric) metric;
}

TsdgOptions *
TsdgGetOptions(Relation index)
{
	return (TsdgOptions *) index->rd_options;
}

void
TsdgParamsFromOptions(Relation index, TsdgBuildParams *params)
{
	TsdgOptions *opts = TsdgGetOptions(index);

	tsdg_build_params_default(params);
	params->build_k = TSDG_DEFAULT_BUILD_K;
	if (opts == NULL)
		return;
	params->degree = opts->degree;
	params->build_k = opts->build_k;
	params->samples = opts->samples;
	params->iterations = opts->iterations;
	params->alpha = (float) opts->alpha;
	/* an index whose reloptions were set when a wider range was accepted */
	params->lambda0 = Min(opts->lambda0, TSDG_MAX_LAMBDA0);
}
