/*
 * An index image shipped to the GPU worker (runs in the session whose search
 * the worker asked for the index): the index's rows, search graph and
 * navigating layer read into a shared memory segment, which the worker makes
 * resident.
 */
#include "postgres.h"

#include "storage/dsm.h"

#include "tsdgoffload.h"

/*
 * The last merge's batch, checked against this session's searches: the
 * worker keeps those they do not reach exact, with the rows the image marks
 * TSDG_IMAGE_UNREACHED (TsdgMetaPageData.unreached).
 */
void
TsdgSetUnreachedCheck(TsdgUnreachedCheck *check, const TsdgMetaPageData *meta)
{
	check->rows = meta->unreached_checked;
	check->ef = tsdg_ef_search;
	check->lambda_limit = tsdg_lambda_search;
}

/*
 * Reads the index into a DSM segment and has the worker make it resident.
 * True when the worker now holds key.
 */
bool
TsdgShipIndex(Relation index, const TsdgMetaPageData *meta, const TsdgIndexKey *key)
{
	int64		n = meta->node_count;
	Size		offset = sizeof(TsdgBulkHeader);
	TsdgBulkHeader header;
	TsdgIndexImage image;
	TsdgMetaPageData after;
	dsm_segment *seg;
	TsdgRequestSlot *slot;
	uint64		request_id;
	bool		loaded;

	memset(&header, 0, sizeof(header));
	header.rows = TsdgBulkAdd(&offset, sizeof(float) * meta->dims * n);
	header.neighbors = TsdgBulkAdd(&offset, sizeof(uint32) * meta->degree * n);
	header.lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * meta->degree * n);
	header.tids = TsdgBulkAdd(&offset, sizeof(ItemPointerData) * n);
	header.flags = TsdgBulkAdd(&offset, sizeof(uint8) * n);
	if (meta->layer_nodes > 0)
	{
		Size		layer_lists = (Size) meta->layer_nodes * meta->degree;

		header.layer_ids = TsdgBulkAdd(&offset, sizeof(uint32) * layer_lists);
		header.layer_lambdas = TsdgBulkAdd(&offset, sizeof(uint8) * layer_lists);
	}
	header.total_size = offset;

	seg = TsdgCreateBulkSegment(header.total_size, "an index the GPU worker loads");
	if (seg == NULL)
	{
		TsdgCountFallback();
		return false;
	}
	memcpy(dsm_segment_address(seg), &header, sizeof(header));
	image.n = n;
	image.dims = meta->dims;
	image.degree = meta->degree;
	image.rows = TsdgBulkArray(dsm_segment_address(seg), header.rows);
	image.neighbors = TsdgBulkArray(dsm_segment_address(seg), header.neighbors);
	image.lambdas = TsdgBulkArray(dsm_segment_address(seg), header.lambdas);
	image.tids = TsdgBulkArray(dsm_segment_address(seg), header.tids);
	image.flags = TsdgBulkArray(dsm_segment_address(seg), header.flags);
	image.layer_ids = TsdgBulkArray(dsm_segment_address(seg), header.layer_ids);
	image.layer_lambdas = TsdgBulkArray(dsm_segment_address(seg), header.layer_lambdas);
	TsdgReadIndexImage(index, meta, &image);
	for (int i = 0; i < Min(meta->unreached_count, TSDG_MAX_UNREACHED); i++)
		if (meta->unreached[i] < n)
			image.flags[meta->unreached[i]] |= TSDG_IMAGE_UNREACHED;

	/* a merge or VACUUM while the pages were read: that image is of no version */
	TsdgReadMeta(index, &after);
	if (after.graph_version != meta->graph_version || after.deleted_count != meta->deleted_count)
	{
		dsm_detach(seg);
		return false;
	}

	slot = TsdgIpcBeginRequest(TSDG_REQUEST_LOAD_INDEX);
	slot->args.load.key = *key;
	slot->args.load.n = n;
	slot->args.load.dims = meta->dims;
	slot->args.load.degree = meta->degree;
	slot->args.load.metric = (TsdgMetric) meta->metric;
	TsdgSetUnreachedCheck(&slot->args.load.check, meta);
	slot->args.load.layer_nodes = meta->layer_nodes;
	slot->bulk_handle = dsm_segment_handle(seg);
	slot->bulk_size = header.total_size;
	request_id = TsdgIpcSubmit(slot);
	loaded = TsdgIpcWait(slot, request_id, -1, NULL, NULL) && slot->reply == TSDG_REPLY_OK;
	if (!loaded)
		TsdgLogFallback(slot->reply == TSDG_REPLY_OUT_OF_MEMORY ?
						TSDG_FALLBACK_OUT_OF_MEMORY : TSDG_FALLBACK_FAILED,
						"the GPU worker could not load the index, searching",
						slot->message[0] != '\0' ? slot->message : "the worker stopped");
	TsdgIpcFinish(slot);
	dsm_detach(seg);
	return loaded;
}
