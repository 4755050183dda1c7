/*
 * An index build on the GPU worker in parts (runs in the session that
 * builds): past maintenance_work_mem the session keeps the rows in its own
 * arrays (temporary files) and sends them through a segment that
 * maintenance_work_mem bounds, a part at a time, and takes the graph back the
 * same way. The turns are those of TsdgPartTurns; the session takes its
 * turns from TsdgWorkerBuildGraph's wait, which the worker's wake-ups drive.
 */
#include "postgres.h"

#include "storage/dsm.h"

#include "tsdgoffload.h"

bool
TsdgBuildSegmentCreateInParts(TsdgBuildSegment *bseg, Size max_bytes, int64 n, int dims,
							  const TsdgBuildParams *params, const TsdgLocalBuildArrays *local)
{
	int64		capacity = TsdgBuildSegmentRowsWithin(max_bytes, dims, params, n);

	if (!TsdgBuildSegmentMake(bseg, capacity, dims, params, n))
		return false;
	bseg->local = *local;
	return true;
}

bool
TsdgTakeBuildTurns(TsdgBuildSegment *bseg, int64 n, int dims, const TsdgBuildParams *params)
{
	void	   *base = dsm_segment_address(bseg->seg);
	TsdgBuildPartArrays local = {(float *) bseg->local.rows, (ItemPointerData *) bseg->local.tids,
	bseg->local.neighbors, bseg->local.lambdas, bseg->local.knn_ids};
	TsdgPartStream in;
	TsdgPartStream out;

	TsdgBuildPartStreams((const TsdgBulkHeader *) base, n, dims, params, &local, &in, &out);
	return TsdgTakePartTurns(bseg->parts, base, &in, &out);
}
