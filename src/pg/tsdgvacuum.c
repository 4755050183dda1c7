/*
 * VACUUM for tsdg. Nodes whose heap rows are gone are flagged deleted: they
 * keep routing searches through the graph but are never returned. Dead
 * pending rows are removed by compacting their page. Every page change is a
 * GenericXLog record. The cleanup merges the pending rows into the graph and
 * drops the deleted nodes when they are many (tsdgmerge.c).
 */
#include "postgres.h"

#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

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

/* Subtracts what this VACUUM removed from the metapage counters. */
static void
TsdgUpdateMetaCounts(Relation index, uint32 deleted_nodes, int64 removed_pending)
{
	Buffer		buf;
	GenericXLogState *state;
	TsdgMetaPage meta;

	if (deleted_nodes == 0 && removed_pending == 0)
		return;
	buf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, buf, 0));
	meta->deleted_count += deleted_nodes;
	meta->pending_count -= removed_pending;
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

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	TsdgReadMeta(info->index, &meta);
	TsdgLayoutFromMeta(&layout, &meta);
	if (meta.node_count > 0)
		deleted_nodes = TsdgDeleteNodes(info, &layout, meta.node_count, callback, callback_state);
	if (BlockNumberIsValid(meta.pending_head))
		removed_pending = TsdgDeletePending(info, &layout, meta.pending_head,
											callback, callback_state);
	TsdgUpdateMetaCounts(info->index, deleted_nodes, removed_pending);

	stats->tuples_removed += deleted_nodes + removed_pending;
	return stats;
}

IndexBulkDeleteResult *
tsdgvacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	TsdgMetaPageData meta;

	if (info->analyze_only)
		return stats;
	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	TsdgVacuumMerge(info);
	TsdgReadMeta(info->index, &meta);
	stats->num_pages = RelationGetNumberOfBlocks(info->index);
	stats->num_index_tuples = (double) (meta.node_count - meta.deleted_count) +
		(double) meta.pending_count;
	stats->estimated_count = false;
	return stats;
}
