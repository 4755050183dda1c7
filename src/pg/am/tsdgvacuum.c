/*
 * VACUUM for tsdg. Nodes whose heap rows are gone are flagged deleted: they
 * keep routing searches through the graph but are never returned. Dead
 * pending rows are removed by compacting their page. Every page change is a
 * GenericXLog record. The cleanup merges the pending rows into the graph and
 * drops the deleted nodes when they are many (tsdgmerge.c).
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "utils/resowner.h"

#include "tsdg.h"

static uint32
TsdgDeleteNodes(IndexVacuumInfo *info, const TsdgLayout *layout, uint32 node_count,
				IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	uint32		newly_deleted = 0;

	for (uint32 first = 0; first < node_count; first = TsdgRowPageEnd(layout, first, node_count))
	{
		uint32		end = TsdgRowPageEnd(layout, first, node_count);
		Buffer		buf;
		GenericXLogState *state;
		Page		page;
		uint32		on_page = 0;

		vacuum_delay_point();

		buf = ReadBufferExtended(index, MAIN_FORKNUM, TsdgRowBlock(layout, first),
								 RBM_NORMAL, info->strategy);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		page = GenericXLogRegisterBuffer(state, buf, 0);
		for (uint32 id = first; id < end; id++)
		{
			TsdgNodeHeader *hdr = (TsdgNodeHeader *) TsdgRowRecord(layout, page, id);

			if ((hdr->flags & TSDG_NODE_DELETED) == 0 && callback(&hdr->heaptid, callback_state))
			{
				hdr->flags |= TSDG_NODE_DELETED;
				on_page++;
			}
		}
		if (on_page > 0)
			GenericXLogFinish(state);
		else
			GenericXLogAbort(state);
		UnlockReleaseBuffer(buf);
		newly_deleted += on_page;
	}
	return newly_deleted;
}

static int64
TsdgDeletePending(IndexVacuumInfo *info, const TsdgLayout *layout, BlockNumber head,
				  IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	BlockNumber blkno = head;
	int64		removed = 0;

	while (BlockNumberIsValid(blkno))
	{
		Buffer		buf;
		GenericXLogState *state;
		Page		page;
		int			count;
		int			kept = 0;

		vacuum_delay_point();

		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, info->strategy);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(index);
		page = GenericXLogRegisterBuffer(state, buf, 0);
		count = TsdgPageRecordCount(page, layout->pending_size);
		for (int i = 0; i < count; i++)
		{
			char	   *rec = PageGetContents(page) + layout->pending_size * i;

			if (callback(&((TsdgPendingHeader *) rec)->heaptid, callback_state))
				continue;
			if (kept != i)
				memmove(PageGetContents(page) + layout->pending_size * kept, rec,
						layout->pending_size);
			kept++;
		}
		blkno = TsdgPageGetOpaque(page)->next;
		if (kept < count)
		{
			((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) +
				layout->pending_size * kept;
			GenericXLogFinish(state);
		}
		else
			GenericXLogAbort(state);
		UnlockReleaseBuffer(buf);
		removed += count - kept;
	}
	return removed;
}

/*
 * Marks the pending rows as moving before their pages are compacted: an odd
 * pending_epoch (tsdg.h) keeps sessions from making or using the GPU worker's
 * copy, which holds them by their place in the list. Returns whether the
 * epoch was even, that is whether a copy made before is still good should
 * this VACUUM remove no pending row.
 */
static bool
TsdgBeginPendingChange(Relation index)
{
	Buffer		buf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	GenericXLogState *state;
	Page		page;
	TsdgMetaPage meta;
	bool		was_even;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	meta = TsdgPageGetMeta(page);
	was_even = meta->pending_epoch % 2 == 0;
	/* odd already: an earlier VACUUM failed midway, and any copy is stale */
	meta->pending_epoch += was_even ? 1 : 2;
	TsdgCoverMeta(page);
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return was_even;
}

/*
 * Subtracts what this VACUUM removed from the metapage counters and ends the
 * pending rows' change begun by TsdgBeginPendingChange, when one was.
 */
static void
TsdgUpdateMetaCounts(Relation index, uint32 deleted_nodes, int64 removed_pending,
					 bool pending_changed, bool epoch_was_even)
{
	Buffer		buf;
	GenericXLogState *state;
	Page		page;
	TsdgMetaPage meta;

	if (deleted_nodes == 0 && removed_pending == 0 && !pending_changed)
		return;
	buf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	meta = TsdgPageGetMeta(page);
	meta->deleted_count += deleted_nodes;
	meta->pending_count -= removed_pending;
	if (pending_changed)
	{
		if (removed_pending == 0 && epoch_was_even)
			meta->pending_epoch--;
		else
			meta->pending_epoch++;
		TsdgCoverMeta(page);
	}
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}

IndexBulkDeleteResult *
tsdgbulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
			   IndexBulkDeleteCallback callback, void *callback_state)
{
	TsdgMetaPageData meta;
	TsdgLayout	layout;
	uint32		deleted_nodes = 0;
	int64		removed_pending = 0;
	bool		pending_changed = false;
	bool		epoch_was_even = false;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	TsdgReadMeta(info->index, &meta);
	TsdgLayoutFromMeta(&layout, &meta);
	if (meta.node_count > 0)
		deleted_nodes = TsdgDeleteNodes(info, &layout, meta.node_count, callback, callback_state);
	if (BlockNumberIsValid(meta.pending_head))
	{
		epoch_was_even = TsdgBeginPendingChange(info->index);
		pending_changed = true;
		removed_pending = TsdgDeletePending(info, &layout, meta.pending_head,
											callback, callback_state);
	}
	TsdgUpdateMetaCounts(info->index, deleted_nodes, removed_pending, pending_changed,
						 epoch_was_even);

	stats->tuples_removed += deleted_nodes + removed_pending;
	return stats;
}

/*
 * The cleanup's merge in a subtransaction: whatever makes a merge fail must
 * not fail the VACUUM, or a table could never be vacuumed again and head for
 * transaction ID wraparound. The merge's error becomes a WARNING and the
 * pending rows stay for a later merge. A cancellation still cancels (an
 * autovacuum must yield to the lock it blocks). A parallel VACUUM is in
 * parallel mode, where no subtransaction can start: the merge runs there as
 * it is.
 */
static void
TsdgVacuumMergeGuarded(IndexVacuumInfo *info)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	if (IsInParallelMode())
	{
		TsdgVacuumMerge(info);
		return;
	}
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		TsdgVacuumMerge(info);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(context);
		error = CopyErrorData();
		if (error->sqlerrcode == ERRCODE_QUERY_CANCELED)
			PG_RE_THROW();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
		ereport(WARNING,
				(errcode(error->sqlerrcode),
				 errmsg("tsdg index \"%s\" not merged: %s",
						RelationGetRelationName(info->index), error->message),
				 errdetail("Its pending rows stay searchable and wait for a later merge.")));
		FreeErrorData(error);
	}
	PG_END_TRY();
}

IndexBulkDeleteResult *
tsdgvacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	TsdgMetaPageData meta;

	if (info->analyze_only)
	{
		/* the planner's count of a search's work, of the graph as it is now */
		TsdgMeasureSearchProfile(info->index);
		return stats;
	}
	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	TsdgVacuumMergeGuarded(info);
	TsdgMeasureSearchProfile(info->index);
	TsdgReadMeta(info->index, &meta);
	stats->num_pages = RelationGetNumberOfBlocks(info->index);
	stats->num_index_tuples = (double) (meta.node_count - meta.deleted_count) +
		(double) meta.pending_count;
	stats->estimated_count = false;
	return stats;
}
