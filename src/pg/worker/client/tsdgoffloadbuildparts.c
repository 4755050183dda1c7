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
TsdgBuildSegmentCreateInParts(TsdgBuildSegment *bseg, Size max_bytes, int dims,
							  const TsdgBuildParams *params, const TsdgLocalBuildArrays *local)
{
	Size		fixed = TsdgBuildSegmentBytes(0, dims, params, true);
	Size		row = (TsdgBuildSegmentBytes(1024, dims, params, true) - fixed) / 1024 + 1;
	int64		capacity = 1;

	if (max_bytes > fixed)
		capacity = Max((int64) ((max_bytes - fixed) / row), 1);
	/* the arrays' alignment: never past max_bytes but for a single row */
	while (capacity > 1 && TsdgBuildSegmentBytes(capacity, dims, params, true) > max_bytes)
		capacity--;
	if (!TsdgBuildSegmentMake(bseg, capacity, dims, params, true))
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
