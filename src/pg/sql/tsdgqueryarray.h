/*
 * The query array of tsdg_search_batch: its elements read into a matrix of
 * the searchable queries, straight from the TOAST table where the array is
 * stored out of line uncompressed (a large array kept in a table).
 */
#ifndef TSDG_QUERY_ARRAY_H
#define TSDG_QUERY_ARRAY_H

#include "postgres.h"

#include "tsdg.h"

/* the queries of the array as one matrix; NULL and zero (cosine) queries have no row */
typedef struct TsdgBatchQueries
{
	int			count;			/* elements of the array */
	int			searchable;		/* rows of matrix */
	int		   *ordinal;		/* per matrix row: its position in the array, from 1 */
	float	   *matrix;
} TsdgBatchQueries;

/* an opened query array: deconstructed, or read slice by slice from its TOAST table */
typedef struct TsdgQueryArray
{
	Datum		value;			/* the argument as passed */
	bool		nulls_allowed;
	const char *function;		/* for the messages */
	int			count;
	char		typalign;
	/* deconstructed */
	Datum	   *elems;
	bool	   *nulls;
	/* streamed: offsets from the start of the array, its varlena header included */
	bool		streamed;
	int32		end;			/* the array's size */
	int32		first_element;
	struct varlena *slice;		/* the bytes slice_start .. slice_end */
	int32		slice_start;
	int32		slice_end;
} TsdgQueryArray;

/*
 * Opens the array argument and counts its elements. NULL elements are an
 * error unless nulls_allowed; a multidimensional array is an error.
 */
extern void TsdgOpenQueryArray(Datum value, bool nulls_allowed, const char *function,
							   TsdgQueryArray *array);
/*
 * Fills queries->matrix (room for array->count rows of dims) with the
 * searchable queries and sets queries->count, searchable and ordinal.
 */
extern void TsdgCollectQueries(TsdgQueryArray *array, TsdgMetric metric, int dims,
							   TsdgBatchQueries *queries);

#endif							/* TSDG_QUERY_ARRAY_H */
