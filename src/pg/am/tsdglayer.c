/*
 * The navigating layer's lists read from an index's layer pages (tsdg.h):
 * for the arrays a resident index searches through the layer (the GPU
 * worker's copies, the batch searches on the CPU) and for the scans.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "tsdg.h"

/*
 * The ids are checked against the layer's node count: a search follows
 * them into arrays of that many rows.
 */
void
TsdgReadLayer(Relation index, const TsdgMetaPageData *meta, uint32 *ids, uint8 *lambdas)
{
	TsdgLayout	layout;
	uint32		n = meta->layer_nodes;
	int			degree = meta->degree;

	if (n == 0)
		return;
	TsdgLayoutFromMeta(&layout, meta);
	if ((int64) n != tsdg_layer_node_count(meta->node_count))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("tsdg index \"%s\" has a navigating layer of %u nodes for a graph of %u",
						RelationGetRelationName(index), n, meta->node_count)));
	layout.list_start = meta->layer_start;
	TsdgReadListRecords(index, &layout, n, ids, lambdas);
	for (Size e = 0; e < (Size) n * degree; e++)
		if (ids[e] != TSDG_INVALID_ID && ids[e] >= n)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("tsdg index \"%s\" has a navigating layer list that refers to node %u of %u",
							RelationGetRelationName(index), ids[e], n)));
}
