/*
 * The pending list read back: the rows inserted since the last merge, kept
 * in pending pages until a merge folds them into the graph, visited in list
 * order for scans (searched exactly) and copied out for merges.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "tsdg.h"

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

int64
TsdgCopyPendingRowsFrom(Relation index, const TsdgLayout *layout, BlockNumber blkno, int skip,
						int64 max, float *rows, ItemPointerData *tids, BlockNumber *end_block,
						int *end_offset)
{
	int64		copied = 0;

	while (BlockNumberIsValid(blkno) && copied < max)
	{
		Buffer		buf = ReadBuffer(index, blkno);
		Page		page;
		int			records;
		int			i;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		records = TsdgPageRecordCount(page, layout->pending_size);
		for (i = skip; i < records && copied < max; i++)
		{
			char	   *rec = PageGetContents(page) + layout->pending_size * i;

			memcpy(rows + copied * layout->dims, TsdgRecordVector(rec), sizeof(float) * layout->dims);
			tids[copied++] = ((TsdgPendingHeader *) rec)->heaptid;
		}
		if (i > skip)
		{
			*end_block = blkno;
			*end_offset = i;
		}
		skip = 0;
		blkno = TsdgPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	return copied;
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
