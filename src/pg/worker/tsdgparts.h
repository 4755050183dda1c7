/*
 * Requests whose data travels in parts through a segment with room for one
 * part of the rows (TsdgPartTurns): a build's rows in and graph out, a
 * merge's inputs in and merged graph out. Both sides derive where each
 * array's part lies in the segment and which rows it holds from the same
 * request, here; the session's turns are taken here too, the worker's in
 * tsdgserverparts.c.
 */
#ifndef TSDG_PARTS_H
#define TSDG_PARTS_H

#include "postgres.h"

#include "tsdgipc.h"

/* the most arrays one direction of a request carries */
#define TSDG_PART_MAX_ARRAYS	8

/* an array that travels: its rows [first, end), row r at local + r * row_bytes */
typedef struct TsdgPartArray
{
	Size		offset;			/* its part in the segment: room for capacity rows */
	Size		row_bytes;
	int64		first;
	int64		end;
	char	   *local;			/* this process's array */
} TsdgPartArray;

/*
 * One direction of a request in parts: rows [first, end) of its arrays go,
 * capacity rows a part; part i is rows [first + i * capacity, ...), of which
 * each array carries those it has.
 */
typedef struct TsdgPartStream
{
	int64		first;
	int64		end;
	int64		capacity;
	int			count;
	TsdgPartArray arrays[TSDG_PART_MAX_ARRAYS];
} TsdgPartStream;

extern void TsdgInitPartTurns(TsdgPartTurns *turns);
extern int64 TsdgPartCount(const TsdgPartStream *stream);
/* part i between the segment at base and the local arrays: into the segment, or out of it */
extern void TsdgCopyPart(const TsdgPartStream *stream, void *base, int64 i, bool into_segment);

/* a build's rows, TIDs and graph (n rows); NULL arrays of a side that has none yet */
typedef struct TsdgBuildPartArrays
{
	float	   *rows;
	ItemPointerData *tids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint32	   *knn_ids;
} TsdgBuildPartArrays;

extern void TsdgBuildPartStreams(const TsdgBulkHeader *header, int64 n, int dims,
								 const TsdgBuildParams *params, const TsdgBuildPartArrays *arrays,
								 TsdgPartStream *in, TsdgPartStream *out);

/*
 * A merge's arrays, each from row 0 (see TsdgBulkHeader): what goes in
 * (the rows and TIDs past the old ones the worker holds, the old lists
 * unless it holds them, the old distances and flags when the header has
 * them), and the merged graph that comes out.
 */
typedef struct TsdgMergePartArrays
{
	float	   *rows;
	ItemPointerData *tids;
	uint32	   *old_knn_ids;
	float	   *old_knn_dists;
	uint32	   *old_neighbors;
	uint8	   *old_lambdas;
	uint8	   *old_changed;
	uint32	   *knn_ids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	uint8	   *changed;
} TsdgMergePartArrays;

extern void TsdgMergePartStreams(const TsdgBulkHeader *header, const TsdgMergeArgs *args,
								 const TsdgMergePartArrays *arrays, TsdgPartStream *in,
								 TsdgPartStream *out);

/*
 * The session's turns that are due: the next in-part once the worker took
 * the last, the out-part the worker sent. True once every in-part is sent.
 */
extern bool TsdgTakePartTurns(TsdgPartTurns *turns, void *base, const TsdgPartStream *in,
							  const TsdgPartStream *out);

#endif							/* TSDG_PARTS_H */
