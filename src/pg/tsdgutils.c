/*
 * tsdg page layout: record sizes, where node i lives, page initialization,
 * metapage access, and the conversion of a vector datum to the float array
 * the core searches (normalized for cosine).
 */
#include "postgres.h"

#include <math.h>

#include "access/relation.h"
#include "access/xloginsert.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/rel.h"

#include "tsdg.h"
#include "vector.h"

/* room for records on a node page: everything after the page header */
#define TSDG_NODE_PAGE_SPACE	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData))
#define TSDG_PENDING_PAGE_SPACE \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(TsdgPageOpaqueData)))

Size
TsdgNodeSize(int dims, int degree)
{
	Size		size = sizeof(TsdgNodeHeader) + sizeof(float) * dims +
		(sizeof(uint32) + sizeof(uint8)) * degree;

	/* the next record's vector must stay float-aligned */
	return TYPEALIGN(sizeof(float), size);
}

int
TsdgMaxDimensions(int degree)
{
	return (int) ((TSDG_NODE_PAGE_SPACE - sizeof(TsdgNodeHeader) -
				   (sizeof(uint32) + sizeof(uint8)) * degree) / sizeof(float));
}

void
TsdgCheckDimensions(Relation index, int dims, int degree)
{
	int			max_dims = TsdgMaxDimensions(degree);

	if (dims > max_dims)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("column cannot have more than %d dimensions for tsdg index \"%s\" with degree %d",
						max_dims, RelationGetRelationName(index), degree),
				 errdetail("The vector has %d dimensions.", dims),
				 errhint("A node record must fit in one %d-byte page; a smaller degree leaves room for more dimensions.",
						 BLCKSZ)));
}

void
TsdgInitLayout(TsdgLayout *layout, int dims, int degree, BlockNumber node_start)
{
	layout->dims = dims;
	layout->degree = degree;
	layout->node_size = TsdgNodeSize(dims, degree);
	layout->nodes_per_page = (int) (TSDG_NODE_PAGE_SPACE / layout->node_size);
	layout->node_start = node_start;
	layout->pending_size = TYPEALIGN(sizeof(float),
									 sizeof(TsdgPendingHeader) + sizeof(float) * dims);
	layout->pending_per_page = (int) (TSDG_PENDING_PAGE_SPACE / layout->pending_size);
}

void
TsdgLayoutFromMeta(TsdgLayout *layout, const TsdgMetaPageData *meta)
{
	TsdgInitLayout(layout, meta->dims, meta->degree, meta->node_start);
	if (meta->node_count > 0 &&
		(layout->node_size != meta->node_size ||
		 layout->nodes_per_page != meta->nodes_per_page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("tsdg metapage describes %u-byte node records, %d per page, but %d dimensions and degree %d give %zu, %d",
						meta->node_size, meta->nodes_per_page, meta->dims, meta->degree,
						layout->node_size, layout->nodes_per_page)));
}

BlockNumber
TsdgNodeBlock(const TsdgLayout *layout, uint32 id)
{
	return layout->node_start + id / layout->nodes_per_page;
}

char *
TsdgNodeRecord(const TsdgLayout *layout, Page page, uint32 id)
{
	return PageGetContents(page) + layout->node_size * (id % layout->nodes_per_page);
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
void
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
}

void
TsdgInitPendingRows(TsdgPendingRows *pending, int dims, int64 capacity)
{
	pending->count = 0;
	pending->capacity = Max(capacity, 16);
	pending->rows = MemoryContextAllocHuge(CurrentMemoryContext,
										   sizeof(float) * dims * pending->capacity);
	pending->tids = MemoryContextAllocHuge(CurrentMemoryContext,
										   sizeof(ItemPointerData) * pending->capacity);
}

/*
 * Calls visit for every row of the pending list from head up to, not
 * including, block stop (InvalidBlockNumber: to the end), in list order,
 * while the row's page is share-locked.
 */
void
TsdgVisitPendingRows(Relation index, const TsdgLayout *layout, BlockNumber head,
					 BlockNumber stop, TsdgPendingVisitor visit, void *arg)
{
	BlockNumber blkno = head;

	while (BlockNumberIsValid(blkno) && blkno != stop)
	{
		Buffer		buf = ReadBuffer(index, blkno);
		Page		page;
		int			records;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		records = TsdgPageRecordCount(page, layout->pending_size);
		for (int i = 0; i < records; i++)
		{
			char	   *rec = PageGetContents(page) + layout->pending_size * i;

			visit(arg, &((TsdgPendingHeader *) rec)->heaptid, TsdgRecordVector(rec));
		}
		blkno = TsdgPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

typedef struct PendingCopy
{
	TsdgPendingRows *pending;
	int			dims;
} PendingCopy;

static void
TsdgAppendPendingRow(void *arg, const ItemPointerData *tid, const float *vector)
{
	PendingCopy *copy = (PendingCopy *) arg;
	TsdgPendingRows *pending = copy->pending;

	if (pending->count == pending->capacity)
	{
		pending->capacity *= 2;
		pending->rows = repalloc_huge(pending->rows,
									  sizeof(float) * copy->dims * pending->capacity);
		pending->tids = repalloc_huge(pending->tids, sizeof(ItemPointerData) * pending->capacity);
	}
	pending->tids[pending->count] = *tid;
	memcpy(pending->rows + pending->count * copy->dims, vector, sizeof(float) * copy->dims);
	pending->count++;
}

/*
 * Appends the rows of the pending list from head up to block stop to
 * pending. The metapage's pending count is only a sizing hint: inserts may
 * have added rows since it was read.
 */
void
TsdgReadPendingRows(Relation index, const TsdgLayout *layout, BlockNumber head,
					BlockNumber stop, TsdgPendingRows *pending)
{
	PendingCopy copy = {pending, layout->dims};

	TsdgVisitPendingRows(index, layout, head, stop, TsdgAppendPendingRow, &copy);
}

void
TsdgInitNodePage(Page page)
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

void
TsdgInitMetaPage(Page page, const TsdgMetaPageData *meta)
{
	TsdgPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(TsdgPageOpaqueData));
	memcpy(TsdgPageGetMeta(page), meta, sizeof(TsdgMetaPageData));
	/* pd_lower past the metadata, so a full-page image keeps it */
	((PageHeader) page)->pd_lower =
		((char *) TsdgPageGetMeta(page) + sizeof(TsdgMetaPageData)) - (char *) page;
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

TsdgMetric
TsdgIndexMetric(Relation index)
{
	FmgrInfo   *proc = index_getprocinfo(index, 1, TSDG_METRIC_PROC);
	int32		metric = DatumGetInt32(FunctionCall0Coll(proc, InvalidOid));

	if (metric != TSDG_METRIC_L2 && metric != TSDG_METRIC_INNER_PRODUCT &&
		metric != TSDG_METRIC_COSINE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("tsdg operator class support function 1 returned unknown metric %d", metric)));
	return (TsdgMetric) metric;
}

/* dimensions declared by the column's type modifier, or 0 when it has none */
int
TsdgIndexTypmodDims(Relation index)
{
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;

	return typmod > 0 ? typmod : 0;
}

/*
 * Copies the floats of a vector datum into out (room for dims floats),
 * normalized for cosine, and sets *vec_dims to the vector's dimensions.
 * False when it has other than dims dimensions (out untouched) or is a zero
 * vector under cosine, which has no direction and so no place in a cosine
 * index. Lets callers fill their arrays without a copy per vector.
 */
bool
TsdgCopyVector(Datum value, TsdgMetric metric, int dims, float *out, int *vec_dims)
{
	Vector	   *vec = DatumGetVector(value);
	bool		copied = vec->dim == dims;

	*vec_dims = vec->dim;
	if (copied)
		memcpy(out, vec->x, sizeof(float) * dims);
	if ((Pointer) vec != DatumGetPointer(value))
		pfree(vec);

	if (copied && metric == TSDG_METRIC_COSINE)
	{
		double		norm = sqrt((double) tsdg_norm_squared(out, dims));

		if (norm == 0.0)
			return false;
		for (int i = 0; i < dims; i++)
			out[i] = (float) (out[i] / norm);
	}
	return copied;
}

/*
 * The floats of a vector datum in a fresh palloc'd array, normalized for
 * cosine. Returns NULL for a zero vector under cosine (see TsdgCopyVector).
 */
float *
TsdgPrepareVector(Datum value, TsdgMetric metric, int *dims)
{
	Vector	   *vec = DatumGetVector(value);
	float	   *out = palloc(sizeof(float) * vec->dim);

	if (!TsdgCopyVector(PointerGetDatum(vec), metric, vec->dim, out, dims))
	{
		pfree(out);
		out = NULL;
	}
	if ((Pointer) vec != DatumGetPointer(value))
		pfree(vec);
	return out;
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
	params->lambda0 = opts->lambda0;
}
