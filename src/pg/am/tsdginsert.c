/*
 * aminsert for tsdg: a new row goes to the tail of the pending list, whose
 * rows every scan searches exactly until a merge moves them into the graph
 * (a new page comes from the free list that merges fill, else the end).
 * The metapage lock serializes inserts; each one is a single GenericXLog
 * record over the metapage, the tail page and, when the tail is full, a new
 * page.
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

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
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector has %d dimensions, index \"%s\" has %d",
						dims, RelationGetRelationName(index), meta->dims)));
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
