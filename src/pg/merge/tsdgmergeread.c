/*
 * A merge's reading, in the session that merges: the detach of the pending
 * list (the pages before an empty page appended to it are what the merge
 * consumes), the live nodes of the old graph (rows, TIDs, k-NN and search
 * lists) and the consumed pending rows into the merge's arrays, the
 * renumbering of the live nodes and the repair of the k-NN lists that held a
 * deleted node, and what was left to the GPU worker's copy, read after all
 * when the worker cannot use it.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdgmerge.h"

/*
 * Appends an empty page to the pending list: the pages before it are what
 * this merge consumes, new rows go to it and after it.
 */
void
TsdgDetachPending(TsdgMerge *m)
{
	Buffer		metabuf = ReadBuffer(m->index, TSDG_METAPAGE_BLKNO);
	TsdgMetaPage meta;
	Buffer		tailbuf;
	Buffer		newbuf;
	TsdgPendingPageSource source;
	GenericXLogState *state;
	Page		newpage;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	m->consumed_head = meta->pending_head;
	m->consumed_tail = meta->pending_tail;
	m->consumed_rows = meta->pending_count;
	m->remaining_head = InvalidBlockNumber;
	if (!BlockNumberIsValid(meta->pending_head))
	{
		memcpy(&m->meta, meta, sizeof(TsdgMetaPageData));
		UnlockReleaseBuffer(metabuf);
		return;
	}

	tailbuf = ReadBuffer(m->index, meta->pending_tail);
	LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	newbuf = TsdgNewPendingBuffer(m->index, meta, &source);

	state = GenericXLogStart(m->index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	newpage = GenericXLogRegisterBuffer(state, newbuf, GENERIC_XLOG_FULL_IMAGE);
	TsdgInitPendingPage(newpage);
	m->remaining_head = BufferGetBlockNumber(newbuf);
	TsdgPageGetOpaque(GenericXLogRegisterBuffer(state, tailbuf, 0))->next = m->remaining_head;
	meta->pending_tail = m->remaining_head;
	TsdgTookPendingPage(meta, &source);
	memcpy(&m->meta, meta, sizeof(TsdgMetaPageData));
	GenericXLogFinish(state);

	UnlockReleaseBuffer(newbuf);
	UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
}

/* the stored k-NN lists of the old graph (old ids) and the renumbering */
typedef struct TsdgOldGraph
{
	int64		nodes;
	int64		knn_nodes;		/* the first nodes, whose lists the k-NN pages hold */
	int			width;			/* knn_k */
	uint32	   *lists;			/* nodes * width, TSDG_INVALID_ID padded (all of it past knn_nodes) */
	uint32	   *new_id;			/* old id -> new id, TSDG_INVALID_ID when deleted */
} TsdgOldGraph;

/* the valid entries of a node's stored k-NN list; returns the count */
static int
TsdgSourceList(const TsdgOldGraph *g, uint32 node, uint32 *out)
{
	int			count = 0;
	const uint32 *list = g->lists + (int64) node * g->width;

	for (int j = 0; j < g->width; j++)
		if (list[j] != TSDG_INVALID_ID && list[j] < g->knn_nodes)
			out[count++] = list[j];
	return count;
}

/*
 * Each live node's k-NN list in the new numbering, with distances: its old
 * list without deleted nodes, repaired with the lists of the deleted nodes
 * it held (their neighbors are likely its own), the k nearest kept. A
 * repaired list is marked in m->old_changed.
 */
static void
TsdgOldKnnLists(TsdgMerge *m, const TsdgOldGraph *g, TsdgMetric metric)
{
	int			source_max = g->width;
	int			candidate_max = source_max * (1 + source_max);
	uint32	   *source = palloc(sizeof(uint32) * source_max);
	uint32	   *second = palloc(sizeof(uint32) * source_max);
	TsdgCandidate *candidates = palloc(sizeof(TsdgCandidate) * candidate_max);

	for (uint32 old = 0; old < g->nodes; old++)
	{
		uint32		self = g->new_id[old];
		int			count = 0;
		int			kept = 0;
		int			sources;
		uint32	   *ids;
		float	   *dists;

		if (self == TSDG_INVALID_ID)
			continue;
		sources = TsdgSourceList(g, old, source);
		for (int j = 0; j < sources; j++)
		{
			uint32		v = g->new_id[source[j]];

			if (v != TSDG_INVALID_ID)
				candidates[count++].id = v;
			else
			{
				int			seconds = TsdgSourceList(g, source[j], second);

				m->old_changed[self] |= TSDG_OLD_REBUILT;
				for (int i = 0; i < seconds; i++)
				{
					uint32		w = g->new_id[second[i]];

					if (w != TSDG_INVALID_ID && w != self)
						candidates[count++].id = w;
				}
			}
		}
		for (int j = 0; j < count; j++)
			candidates[j].distance = tsdg_metric_distance(metric, m->rows + (int64) self * m->dims,
														  m->rows + (int64) candidates[j].id * m->dims,
														  m->dims);
		qsort(candidates, count, sizeof(TsdgCandidate), TsdgCompareCandidates);

		ids = m->old_knn_ids + (int64) self * m->k;
		dists = m->old_knn_dists + (int64) self * m->k;
		for (int j = 0; j < count && kept < m->k; j++)
			if (candidates[j].id != self && (kept == 0 || ids[kept - 1] != candidates[j].id))
			{
				ids[kept] = candidates[j].id;
				dists[kept++] = candidates[j].distance;
			}
		for (; kept < m->k; kept++)
		{
			ids[kept] = TSDG_INVALID_ID;
			dists[kept] = get_float4_infinity();
		}
		if ((old & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pfree(source);
	pfree(second);
	pfree(candidates);
}

/*
 * The stored search lists (read in the new order, with old ids) in the new
 * numbering: edges to deleted nodes (or out of range) are dropped, and a list
 * that lost one is marked in m->old_changed, so that TSDG builds it again.
 */
static void
TsdgRenumberSearchLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			degree = m->meta.degree;

	for (int64 s = 0; s < m->n_old; s++)
	{
		uint32	   *ids = m->old_neighbors + s * degree;
		uint8	   *lambdas = m->old_lambdas + s * degree;
		int			kept = 0;

		for (int j = 0; j < degree; j++)
		{
			uint32		v = ids[j];

			if (v == TSDG_INVALID_ID)
				continue;
			v = v < g->nodes ? g->new_id[v] : TSDG_INVALID_ID;
			if (v == TSDG_INVALID_ID)
			{
				m->old_changed[s] |= TSDG_OLD_REBUILT;
				continue;
			}
			ids[kept] = v;
			lambdas[kept++] = lambdas[j];
		}
		for (; kept < degree; kept++)
		{
			ids[kept] = TSDG_INVALID_ID;
			lambdas[kept] = 0;
		}
	}
}

/*
 * Reads the live nodes (vectors, TIDs, k-NN or TSDG lists) of the old graph
 * and the consumed pending rows into the merge's arrays, and builds the
 * live nodes' starting k-NN lists.
 */
/*
 * Reads the rows of the nodes [0, nodes) of the old graph: the live ones get
 * new ids in order (into new_id, deleted ones TSDG_INVALID_ID), their TIDs and
 * vectors go to m->tids and m->rows, m->n_old counts them.
 */
static void
TsdgReadOldRows(TsdgMerge *m, uint32 nodes, uint32 *new_id, int64 capacity)
{
	m->n_old = 0;
	for (uint32 first = 0, end; first < nodes; first = end)
	{
		Buffer		buf = ReadBuffer(m->index, TsdgRowBlock(&m->layout, first));
		Page		page;

		end = TsdgRowPageEnd(&m->layout, first, nodes);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			TsdgNodeHeader *hdr = (TsdgNodeHeader *) TsdgRowRecord(&m->layout, page, id);

			if (hdr->flags & TSDG_NODE_DELETED)
			{
				new_id[id] = TSDG_INVALID_ID;
				continue;
			}
			if (m->n_old == capacity)
				elog(ERROR, "tsdg index \"%s\" has more live nodes than its metapage counts",
					 RelationGetRelationName(m->index));
			new_id[id] = (uint32) m->n_old;
			m->tids[m->n_old] = hdr->heaptid;
			memcpy(m->rows + m->n_old * m->dims, TsdgRecordVector(hdr), sizeof(float) * m->dims);
			m->n_old++;
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The search lists of the live nodes of the old graph, old ids until
 * TsdgRenumberSearchLists. The live nodes a deleted node's list points to
 * lose that edge when the merge drops the node: they are marked
 * TSDG_OLD_RECHECK in m->old_changed, for the merge's unreached-row check.
 */
static void
TsdgReadOldLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	const TsdgMetaPageData *meta = &m->meta;
	uint32	   *dropped = palloc(sizeof(uint32) * meta->degree);
	uint8	   *dropped_lambdas = palloc(sizeof(uint8) * meta->degree);

	for (uint32 first = 0; first < g->nodes; first += m->layout.lists_per_page)
	{
		uint32		end = Min(first + m->layout.lists_per_page, g->nodes);
		Buffer		buf = ReadBuffer(m->index, TsdgListBlock(&m->layout, first));
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			char	   *rec = TsdgListRecord(&m->layout, page, id);
			uint32		self = g->new_id[id];

			if (self != TSDG_INVALID_ID)
			{
				TsdgListRead(&m->layout, rec, m->old_neighbors + (int64) self * meta->degree,
							 m->old_lambdas + (int64) self * meta->degree);
				continue;
			}
			TsdgListRead(&m->layout, rec, dropped, dropped_lambdas);
			for (int j = 0; j < meta->degree; j++)
				if (dropped[j] < g->nodes && g->new_id[dropped[j]] != TSDG_INVALID_ID)
					m->old_changed[g->new_id[dropped[j]]] |= TSDG_OLD_RECHECK;
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(dropped);
	pfree(dropped_lambdas);
}

/* marks an old node to check again after the merge (TsdgRecheckOldRows) */
static void
TsdgRecheckOldNode(TsdgMerge *m, const TsdgOldGraph *g, uint32 old)
{
	if (old < g->nodes && g->new_id[old] != TSDG_INVALID_ID && g->new_id[old] < m->split)
		m->old_changed[g->new_id[old]] |= TSDG_OLD_RECHECK;
}

/*
 * Old rows the merge may leave unfound without losing an edge into them,
 * marked TSDG_OLD_RECHECK in m->old_changed (past m->split the check takes
 * every row): those the old graph's searches did not reach (the metapage's
 * list), and those of its navigating set, which every search started from
 * and so found without an edge into them, while the merged graph's set is
 * chosen again (and its strided nodes move with the renumbering).
 */
static void
TsdgRecheckOldRows(TsdgMerge *m, const TsdgOldGraph *g)
{
	const TsdgMetaPageData *meta = &m->meta;
	int			entry_count = Min(meta->entry_count, TSDG_MAX_ENTRY_POINTS);
	uint32	   *navigating = palloc(sizeof(uint32) * (entry_count + tsdg_strided_entry_count(g->nodes)));
	int			count = tsdg_navigating_set(meta->entry_points, entry_count, g->nodes, navigating);

	for (int i = 0; i < count; i++)
		TsdgRecheckOldNode(m, g, navigating[i]);
	for (int i = 0; i < Min(meta->unreached_count, TSDG_MAX_UNREACHED); i++)
		TsdgRecheckOldNode(m, g, meta->unreached[i]);
	pfree(navigating);
}

/* the stored k-NN lists of the old graph, old ids, into g->lists */
static void
TsdgReadOldKnn(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			per_page = TsdgKnnPerPage(g->width);

	for (int64 i = g->knn_nodes * g->width; i < g->nodes * g->width; i++)
		g->lists[i] = TSDG_INVALID_ID;
	for (int64 first = 0; first < g->knn_nodes; first += per_page)
	{
		int64		end = Min(first + per_page, g->knn_nodes);
		Buffer		buf = ReadBuffer(m->index, m->meta.knn_start + first / per_page);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(g->lists + first * g->width, PageGetContents(BufferGetPage(buf)),
			   sizeof(uint32) * g->width * (end - first));
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Without deletes, the lists read from the pages keep their ids; only ids
 * out of range (a damaged page) are dropped, from the k-NN lists as
 * TsdgSourceList drops them, and from the search lists as
 * TsdgRenumberSearchLists drops edges to deleted nodes.
 */
static void
TsdgCheckOldLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	for (int64 i = 0; i < g->nodes * g->width; i++)
		if (g->lists[i] != TSDG_INVALID_ID && g->lists[i] >= g->knn_nodes)
			g->lists[i] = TSDG_INVALID_ID;
	TsdgRenumberSearchLists(m, g);
}

/*
 * Sets m->split once the stored lists are read: the live nodes with a
 * stored k-NN list, numbered first. The nodes past them join the batch, so
 * an old search list that points at one of them loses that edge and is
 * built again (marked in m->old_changed), as after a delete.
 */
static void
TsdgSplitAtStoredKnn(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			degree = m->meta.degree;

	m->split = 0;
	for (int64 old = 0; old < g->knn_nodes; old++)
		m->split += g->new_id[old] != TSDG_INVALID_ID;
	if (m->split == m->n_old)
		return;
	for (int64 s = 0; s < m->split; s++)
	{
		uint32	   *ids = m->old_neighbors + s * degree;
		uint8	   *lambdas = m->old_lambdas + s * degree;
		int			kept = 0;

		for (int j = 0; j < degree && ids[j] != TSDG_INVALID_ID; j++)
		{
			if (ids[j] >= m->split)
			{
				m->old_changed[s] |= TSDG_OLD_REBUILT;
				continue;
			}
			ids[kept] = ids[j];
			lambdas[kept++] = lambdas[j];
		}
		for (int j = kept; j < degree && ids[j] != TSDG_INVALID_ID; j++)
		{
			ids[j] = TSDG_INVALID_ID;
			lambdas[j] = 0;
		}
	}
}

void
TsdgLoadRows(TsdgMerge *m, TsdgMetric metric)
{
	const TsdgMetaPageData *meta = &m->meta;
	TsdgOldGraph g;
	int64		capacity;
	TsdgPendingRows pending;
	TsdgBuildParams params;
	TsdgWorkerCopy copy = TSDG_COPY_NONE;
	TsdgMergeSegmentContents contents;
	bool		on_worker;

	MemSet(&g, 0, sizeof(g));
	g.nodes = meta->node_count;
	g.knn_nodes = TsdgStoredKnnNodes(meta);
	if (g.nodes > 0 && meta->knn_k != meta->build_k)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tsdg index \"%s\" keeps no k-NN lists to merge with",
						RelationGetRelationName(m->index)),
				 errhint("REINDEX the index.")));
	g.width = meta->build_k;
	on_worker = TsdgWorkerAwaitRequest() && TsdgWorkerComputes(metric, true);
	TsdgPlanMergeMemory(m, on_worker);
	g.new_id = TsdgMergeAlloc(m, sizeof(uint32) * Max(g.nodes, 1), false);

	capacity = (int64) (meta->node_count - meta->deleted_count) + m->consumed_rows;
	m->tids = TsdgMergeAlloc(m, sizeof(ItemPointerData) * Max(capacity, 1), false);
	m->n_old = 0;
	TsdgMergeParams(meta, &params);

	/*
	 * Without deletes, the worker may still hold this graph: the old rows,
	 * and when it built or merged it its lists too, are then left to it,
	 * unless a merge that has to write all rows again (its extents full)
	 * would need them here, or the rows past the stored k-NN lists are part
	 * of the batch.
	 */
	if (meta->deleted_count == 0 && g.nodes > 0 && meta->row_extent_count < TSDG_MAX_ROW_EXTENTS &&
		on_worker)
		copy = TsdgWorkerCopyOf(m->index, meta);
	if (copy == TSDG_COPY_ROWS && g.knn_nodes < g.nodes)
		copy = TSDG_COPY_NONE;
	contents.old_rows = copy == TSDG_COPY_NONE;
	contents.old_lists = copy != TSDG_COPY_GRAPH;
	contents.old_knn_dists = meta->deleted_count > 0;
	contents.merged_knn = !TsdgKnnPagesMayLagFor(meta, g.nodes + m->consumed_rows);
	if (on_worker && TsdgMergeSegmentCreate(&m->segment, g.nodes, m->consumed_rows, m->dims, &params,
											&contents))
	{
		/*
		 * read straight into the worker's segment (its stored k-NN ids too,
		 * without deletes); the old lists the worker holds are not read, nor
		 * its rows: they are read here only should the worker drop them, so
		 * the local array for them stays untouched memory until then
		 */
		m->left_to_worker = copy;
		m->rows = m->segment.rows_from == 0 ? m->segment.rows :
			TsdgMergeAlloc(m, sizeof(float) * m->dims * Max(capacity, 1), false);
		m->old_neighbors = m->segment.old_neighbors;
		m->old_lambdas = m->segment.old_lambdas;
		m->old_changed = m->segment.old_changed;
		g.lists = meta->deleted_count == 0 ? m->segment.old_knn_ids :
			TsdgMergeAlloc(m, sizeof(uint32) * Max(g.nodes, 1) * g.width, false);
	}
	else
	{
		/*
		 * A merge past maintenance_work_mem goes to the worker in parts from
		 * these arrays: what its copy holds is left to it all the same
		 */
		if (m->segment.in_parts)
			m->left_to_worker = copy;
		if (m->left_to_worker != TSDG_COPY_GRAPH)
		{
			g.lists = TsdgMergeAlloc(m, sizeof(uint32) * Max(g.nodes, 1) * g.width, false);
			m->old_neighbors = TsdgMergeAlloc(m, sizeof(uint32) * Max(capacity, 1) * meta->degree,
											  false);
			m->old_lambdas = TsdgMergeAlloc(m, sizeof(uint8) * Max(capacity, 1) * meta->degree,
											false);
		}
		m->old_changed = TsdgMergeAlloc(m, Max(capacity, 1), true);
		m->rows = TsdgMergeAlloc(m, sizeof(float) * m->dims * Max(capacity, 1), false);
	}

	if (m->left_to_worker != TSDG_COPY_NONE)
	{
		for (uint32 id = 0; id < g.nodes; id++)
			g.new_id[id] = id;
		m->n_old = g.nodes;
	}
	else
		TsdgReadOldRows(m, g.nodes, g.new_id, capacity);
	if (m->left_to_worker != TSDG_COPY_GRAPH)
	{
		TsdgReadOldLists(m, &g);
		TsdgReadOldKnn(m, &g);
	}

	/* the consumed pending rows, after the live nodes */
	if (m->segment.seg != NULL || m->spill != NULL)
	{
		int64		room = m->segment.seg != NULL ?
			m->segment.old_capacity + m->segment.new_capacity : capacity;

		/*
		 * read apart, as their count may exceed the metapage's, then moved in
		 * (arrays in the segment or in files do not grow)
		 */
		TsdgInitPendingRows(&pending, m->dims, m->consumed_rows);
		TsdgReadPendingRows(m->index, &m->layout, m->consumed_head, m->remaining_head, &pending);
		if (m->n_old + pending.count > room)
			elog(ERROR, "tsdg index \"%s\" has more pending rows than its metapage counts",
				 RelationGetRelationName(m->index));
		memcpy(m->rows + m->n_old * m->dims, pending.rows, sizeof(float) * m->dims * pending.count);
		if (m->spill == NULL)
			m->tids = repalloc_huge(m->tids, sizeof(ItemPointerData) * Max(m->n_old + pending.count, 1));
		memcpy(m->tids + m->n_old, pending.tids, sizeof(ItemPointerData) * pending.count);
		m->n_new = pending.count;
		pfree(pending.rows);
		pfree(pending.tids);
	}
	else
	{
		pending.count = m->n_old;
		pending.capacity = Max(capacity, 1);
		pending.rows = m->rows;
		pending.tids = m->tids;
		TsdgReadPendingRows(m->index, &m->layout, m->consumed_head, m->remaining_head, &pending);
		m->rows = pending.rows;
		m->tids = pending.tids;
		m->n_new = pending.count - m->n_old;
	}
	m->consumed_rows = m->n_new;

	m->split = m->n_old;
	if (meta->deleted_count == 0)
	{
		/* the ids stay, so the stored lists are the starting lists */
		Assert(m->n_old == g.nodes);
		if (m->left_to_worker != TSDG_COPY_GRAPH)
		{
			TsdgCheckOldLists(m, &g);
			TsdgSplitAtStoredKnn(m, &g);
		}
		m->old_knn_ids = g.lists;
		m->old_knn_dists = NULL;
		TsdgRecheckOldRows(m, &g);
		return;
	}
	TsdgRenumberSearchLists(m, &g);
	if (m->segment.seg != NULL)
	{
		m->old_knn_ids = m->segment.old_knn_ids;
		m->old_knn_dists = m->segment.old_knn_dists;
	}
	else
	{
		m->old_knn_ids = TsdgMergeAlloc(m, sizeof(uint32) * Max(m->n_old, 1) * m->k, false);
		m->old_knn_dists = TsdgMergeAlloc(m, sizeof(float) * Max(m->n_old, 1) * m->k, false);
	}
	TsdgOldKnnLists(m, &g, metric);
	TsdgSplitAtStoredKnn(m, &g);
	TsdgRecheckOldRows(m, &g);
}

/*
 * Reads what TsdgLoadRows left to the worker's copy of the old graph (the
 * merge has no deletes, so the ids are the stored ones), the lists into
 * local memory when the segment was made without them.
 */
void
TsdgReadLeftGraph(TsdgMerge *m)
{
	TsdgOldGraph g;

	if (m->old_knn_ids == NULL)
	{
		Size		lists = (Size) Max(m->n_old, 1) * m->meta.degree;

		m->old_knn_ids = TsdgMergeAlloc(m, sizeof(uint32) * Max(m->n_old, 1) * m->k, false);
		m->old_neighbors = TsdgMergeAlloc(m, sizeof(uint32) * lists, false);
		m->old_lambdas = TsdgMergeAlloc(m, sizeof(uint8) * lists, false);
	}

	g.nodes = m->n_old;
	g.knn_nodes = TsdgStoredKnnNodes(&m->meta);
	g.width = m->k;
	g.lists = m->old_knn_ids;
	g.new_id = palloc_extended(sizeof(uint32) * Max(m->n_old, 1), MCXT_ALLOC_HUGE);
	TsdgReadOldRows(m, (uint32) m->n_old, g.new_id, m->n_old);
	if (m->left_to_worker == TSDG_COPY_GRAPH)
	{
		TsdgReadOldLists(m, &g);
		TsdgReadOldKnn(m, &g);
		TsdgCheckOldLists(m, &g);
		TsdgSplitAtStoredKnn(m, &g);
	}
	pfree(g.new_id);
	m->left_to_worker = TSDG_COPY_NONE;
}

/*
 * The old rows the worker merged from its copy, read after all: it did not
 * compute the merged graph's summary from them.
 */
void
TsdgReadLeftRows(TsdgMerge *m)
{
	uint32	   *new_id;

	if (m->left_to_worker == TSDG_COPY_NONE)
		return;
	new_id = palloc_extended(sizeof(uint32) * Max(m->n_old, 1), MCXT_ALLOC_HUGE);
	TsdgReadOldRows(m, (uint32) m->n_old, new_id, m->n_old);
	pfree(new_id);
}
