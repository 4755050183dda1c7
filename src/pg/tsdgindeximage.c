/*
 * The whole graph of a tsdg index as flat arrays, read from its node pages:
 * what the GPU worker uploads, and what a batch search on the CPU searches.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "tsdg.h"
#include "tsdgworker.h"

void
TsdgReadIndexImage(Relation index, const TsdgMetaPageData *meta, TsdgIndexImage *image)
{
	TsdgLayout	layout;
	int64		id = 0;

	TsdgLayoutFromMeta(&layout, meta);
	Assert(image->n == meta->node_count && image->dims == layout.dims &&
		   image->degree == layout.degree);

	while (id < image->n)
	{
		Buffer		buf = ReadBuffer(index, TsdgNodeBlock(&layout, (uint32) id));
		Page		page;
		int64		end = Min(id + layout.nodes_per_page, image->n);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (; id < end; id++)
		{
			char	   *rec = TsdgNodeRecord(&layout, page, (uint32) id);
			TsdgNodeHeader *hdr = (TsdgNodeHeader *) rec;

			image->tids[id] = hdr->heaptid;
			image->flags[id] = (uint8) hdr->flags;
			memcpy(image->rows + id * layout.dims, TsdgRecordVector(rec),
				   sizeof(float) * layout.dims);
			memcpy(image->neighbors + id * layout.degree, TsdgNodeNeighbors(rec, layout.dims),
				   sizeof(uint32) * layout.degree);
			memcpy(image->lambdas + id * layout.degree,
				   TsdgNodeLambdas(rec, layout.dims, layout.degree), layout.degree);
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}
