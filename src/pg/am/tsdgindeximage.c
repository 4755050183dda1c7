/*
 * The whole graph of a tsdg index as flat arrays, read from its row, list and layer pages:
 * what the GPU worker uploads, and what a batch search on the CPU searches.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "tsdg.h"

void
TsdgReadIndexImage(Relation index, const TsdgMetaPageData *meta, TsdgIndexImage *image)
{
	TsdgLayout	layout;
	uint32		n = (uint32) image->n;

	TsdgLayoutFromMeta(&layout, meta);
	Assert(image->n == meta->node_count && image->dims == layout.dims &&
		   image->degree == layout.degree);

	for (uint32 id = 0; id < n;)
	{
		Buffer		buf = ReadBuffer(index, TsdgRowBlock(&layout, id));
		uint32		end = TsdgRowPageEnd(&layout, id, n);
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (; id < end; id++)
		{
			char	   *rec = TsdgRowRecord(&layout, page, id);
			TsdgNodeHeader *hdr = (TsdgNodeHeader *) rec;

			image->tids[id] = hdr->heaptid;
			image->flags[id] = (uint8) hdr->flags;
			memcpy(image->rows + (Size) id * layout.dims, TsdgRecordVector(rec),
				   sizeof(float) * layout.dims);
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}

	TsdgReadListRecords(index, &layout, n, image->neighbors, image->lambdas);
	TsdgReadLayer(index, meta, image->layer_ids, image->layer_lambdas);
}
