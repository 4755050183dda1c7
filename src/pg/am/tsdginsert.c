/*
 * aminsert for tsdg: a new row goes to the tail of the pending list, whose
 * rows every scan searches exactly until a merge moves them into the graph
 * (a new page comes from the free list that merges fill, a free extent, else
 * the end; a merge's detach of the pending list takes its page the same way).
 * The metapage lock serializes inserts; each one is a single GenericXLog
 * record over the metapage, the tail page and, when the tail is full, a new
 * page.
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

/*
 * A page for pending rows, exclusively locked: the head of the free list
 * when there is one, else the first block of a free extent (zeroed), else a
 * new page. The caller holds the metapage locked exclusively, initializes
 * the page with a full image, and applies *source to the metapage
 * (TsdgTookPendingPage) in the record that does.
 */
Buffer
TsdgNewPendingBuffer(Relation index, const TsdgMetaPageData *meta, TsdgPendingPageSource *source)
{
	Buffer		buf;

	source->free_head_after = meta->free_head;
	source->free_extent = -1;
	if (meta->free_head != TSDG_NO_BLOCK)
	{
		buf = ReadBuffer(index, meta->free_head);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		source->free_head_after = TsdgPageGetOpaque(BufferGetPage(buf))->next;
		if (source->free_head_after == InvalidBlockNumber)
			source->free_head_after = TSDG_NO_BLOCK;
		return buf;
	}
	for (int e = 0; e < TSDG_MAX_FREE_EXTENTS; e++)
		if (meta->free_extents[e].blocks > 0)
		{
			source->free_extent = e;
			return ReadBufferExtended(index, MAIN_FORKNUM, meta->free_extents[e].start,
									  RBM_ZERO_AND_LOCK, NULL);
		}
	return TsdgNewBuffer(index, MAIN_FORKNUM);
}

void
TsdgTookPendingPage(TsdgMetaPageData *meta, const TsdgPendingPageSource *source)
{
	meta->free_head = source->free_head_after;
	if (source->free_extent >= 0)
	{
		meta->free_extents[source->free_extent].start++;
		meta->free_extents[source->free_extent].blocks--;
	}
}

static void
TsdgAppendPending(Relation index, ItemPointer heap_tid, const float *vec, int dims)
{
	Buffer		metabuf;
	Buffer		tailbuf = InvalidBuffer;
	Buffer		newbuf = InvalidBuffer;
	TsdgMetaPage meta;
	TsdgLayout	layout;
	GenericXLogState *state;
	Page		target;
	char	   *rec;
	TsdgPendingPageSource source;

	metabuf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	if (meta->magic != TSDG_MAGIC_NUMBER || meta->version != TSDG_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" has no valid tsdg metapage", RelationGetRelationName(index))));
	if (meta->dims == 0)
		TsdgCheckDimensions(index, dims);
	else if (dims != meta->dims)
		TsdgWrongDimensions(index, dims, meta->dims);
	TsdgInitLayout(&layout, dims, meta->degree, meta->node_count);

	if (BlockNumberIsValid(meta->pending_tail))
	{
		tailbuf = ReadBuffer(index, meta->pending_tail);
		LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
		if (TsdgPageRecordCount(BufferGetPage(tailbuf), layout.pending_size) >=
			layout.pending_per_page)
			newbuf = TsdgNewPendingBuffer(index, meta, &source);
	}
	else
		newbuf = TsdgNewPendingBuffer(index, meta, &source);

	/* nothing can fail from here to GenericXLogFinish */
	state = GenericXLogStart(index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	target = BufferIsValid(tailbuf) ? GenericXLogRegisterBuffer(state, tailbuf, 0) : NULL;
	if (BufferIsValid(newbuf))
	{
		Page		newpage = GenericXLogRegisterBuffer(state, newbuf, GENERIC_XLOG_FULL_IMAGE);
		BlockNumber newblk = BufferGetBlockNumber(newbuf);

		TsdgInitPendingPage(newpage);
		if (target != NULL)
			TsdgPageGetOpaque(target)->next = newblk;
		else
			meta->pending_head = newblk;
		meta->pending_tail = newblk;
		TsdgTookPendingPage(meta, &source);
		target = newpage;
	}

	rec = PageGetContents(target) +
		layout.pending_size * TsdgPageRecordCount(target, layout.pending_size);
	MemSet(rec, 0, layout.pending_size);
	((TsdgPendingHeader *) rec)->heaptid = *heap_tid;
	memcpy(TsdgRecordVector(rec), vec, sizeof(float) * dims);
	((PageHeader) target)->pd_lower += layout.pending_size;

	meta->dims = dims;
	meta->pending_count++;
	GenericXLogFinish(state);

	if (BufferIsValid(newbuf))
		UnlockReleaseBuffer(newbuf);
	if (BufferIsValid(tailbuf))
		UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
}

bool
tsdginsert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
		   Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
		   IndexInfo *indexInfo)
{
	MemoryContext insert_ctx;
	MemoryContext old_ctx;
	float	   *vec;
	int			dims;

	if (isnull[0])
		return false;

	insert_ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg insert",
									   ALLOCSET_DEFAULT_SIZES);
	old_ctx = MemoryContextSwitchTo(insert_ctx);

	vec = TsdgPrepareVector(values[0], TsdgIndexMetric(index), &dims);
	if (vec != NULL)			/* zero vectors have no place under cosine */
		TsdgAppendPending(index, heap_tid, vec, dims);

	MemoryContextSwitchTo(old_ctx);
	MemoryContextDelete(insert_ctx);
	return false;
}
