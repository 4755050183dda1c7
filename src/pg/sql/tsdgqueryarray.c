/*
 * Reading the query array of tsdg_search_batch into a matrix. A large array
 * kept in a table is stored out of line: detoasting it copies its megabytes
 * into freshly allocated (and, in a new session, freshly page-faulted)
 * memory, only for them to be copied again into the matrix the worker reads.
 * An array stored out of line uncompressed is therefore read slice by slice
 * from its TOAST table, each vector copied from the slice into the matrix;
 * any other array is detoasted and deconstructed as usual.
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/tupmacs.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "tsdgqueryarray.h"
#include "vector.h"

/* bytes of the TOAST value read at a time (128 chunks) */
#define TSDG_QUERY_SLICE	(256 * 1024)

static void
TsdgCheckArrayDimensions(int ndim, const char *function)
{
	if (ndim > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s takes a one-dimensional array of queries", function)));
}

static void
TsdgDeconstructQueryArray(TsdgQueryArray *array)
{
	ArrayType  *detoasted = DatumGetArrayTypeP(array->value);
	int16		typlen;
	bool		typbyval;

	TsdgCheckArrayDimensions(ARR_NDIM(detoasted), array->function);
	if (!array->nulls_allowed && array_contains_nulls(detoasted))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s does not take NULL queries", array->function),
				 errhint("Leave the NULL elements out of the array, or use tsdg_search_batch, which skips them.")));
	get_typlenbyvalalign(ARR_ELEMTYPE(detoasted), &typlen, &typbyval, &array->typalign);
	deconstruct_array(detoasted, ARR_ELEMTYPE(detoasted), typlen, typbyval, array->typalign,
					  &array->elems, &array->nulls, &array->count);
	array->streamed = false;
}

/* The bytes offset .. offset + len of a streamed array, read from the TOAST table where needed. */
static const char *
TsdgArrayBytes(TsdgQueryArray *array, int32 offset, int32 len)
{
	if (offset < VARHDRSZ || len < 0 || offset > array->end - len)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("query array element beyond the end of the array")));
	if (array->slice == NULL || offset < array->slice_start || offset + len > array->slice_end)
	{
		int32		slice_len = Min(Max(len, TSDG_QUERY_SLICE), array->end - offset);

		if (array->slice != NULL)
			pfree(array->slice);
		/* the slice offsets of a TOAST value start after its varlena header */
		array->slice = detoast_attr_slice((struct varlena *) DatumGetPointer(array->value),
										  offset - VARHDRSZ, slice_len);
		array->slice_start = offset;
		array->slice_end = offset + slice_len;
	}
	return VARDATA(array->slice) + (offset - array->slice_start);
}

/*
 * Opens an array stored out of line uncompressed for reading in slices:
 * false where it is another kind of array, or has a NULL bitmap, or elements
 * aligned beyond what a slice's data guarantees.
 */
static bool
TsdgStreamQueryArray(TsdgQueryArray *array)
{
	struct varlena *attr = (struct varlena *) DatumGetPointer(array->value);
	struct varatt_external toast_pointer;
	const char *header;
	int32		ndim;
	int32		dataoffset;
	Oid			elemtype;
	int16		typlen;
	bool		typbyval;

	if (!VARATT_IS_EXTERNAL_ONDISK(attr))
		return false;
	VARATT_EXTERNAL_GET_POINTER(toast_pointer, attr);
	if (VARATT_EXTERNAL_IS_COMPRESSED(toast_pointer))
		return false;

	array->streamed = true;
	array->slice = NULL;
	array->end = VARATT_EXTERNAL_GET_EXTSIZE(toast_pointer) + VARHDRSZ;
	header = TsdgArrayBytes(array, VARHDRSZ, Min(array->end, ARR_OVERHEAD_NONULLS(1)) - VARHDRSZ)
		- VARHDRSZ;
	/* the fields of ArrayType, which the slice's bytes hold from its ndim on */
	memcpy(&ndim, header + offsetof(ArrayType, ndim), sizeof(int32));
	memcpy(&dataoffset, header + offsetof(ArrayType, dataoffset), sizeof(int32));
	memcpy(&elemtype, header + offsetof(ArrayType, elemtype), sizeof(Oid));
	TsdgCheckArrayDimensions(ndim, array->function);
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &array->typalign);
	/*
	 * A slice's data starts 4 bytes into a MAXALIGNed allocation, at an
	 * element's offset: 4-byte alignment of the elements holds, 8 does not.
	 */
	if (dataoffset != 0 || typlen != -1 || array->typalign == TYPALIGN_DOUBLE)
	{
		pfree(array->slice);
		array->slice = NULL;
		array->streamed = false;
		return false;
	}
	if (ndim == 0)
		array->count = 0;
	else
		memcpy(&array->count, header + sizeof(ArrayType), sizeof(int32));
	array->first_element = ARR_OVERHEAD_NONULLS(ndim);
	return true;
}

void
TsdgOpenQueryArray(Datum value, bool nulls_allowed, const char *function, TsdgQueryArray *array)
{
	memset(array, 0, sizeof(TsdgQueryArray));
	array->value = value;
	array->nulls_allowed = nulls_allowed;
	array->function = function;
	if (!TsdgStreamQueryArray(array))
		TsdgDeconstructQueryArray(array);
}

/* One query into the next row of the matrix, or an error for a vector of other dimensions. */
static void
TsdgCollectQuery(Datum value, int ordinal, TsdgMetric metric, int dims, TsdgBatchQueries *queries)
{
	int			vec_dims;

	if (TsdgCopyVector(value, metric, dims, queries->matrix + (Size) queries->searchable * dims,
					   &vec_dims))
		queries->ordinal[queries->searchable++] = ordinal;
	else if (vec_dims != dims)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", dims, vec_dims),
				 errdetail("Query %d of the batch does not match the index.", ordinal)));
}

/*
 * The elements of a streamed array into the matrix; false at an element not
 * stored as a plain 4-byte-header varlena (the array is then deconstructed).
 */
static bool
TsdgCollectStreamed(TsdgQueryArray *array, TsdgMetric metric, int dims, TsdgBatchQueries *queries)
{
	int32		offset = array->first_element;

	for (int i = 0; i < array->count; i++)
	{
		const char *element;
		int32		size;

		offset = att_align_nominal(offset, array->typalign);
		element = TsdgArrayBytes(array, offset, VARHDRSZ);
		if (!VARATT_IS_4B_U(element))
			return false;
		size = VARSIZE(element);
		/* the dimension count is read from the element before it is checked */
		if (size < (int32) VECTOR_SIZE(1))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("query array element %d is too short for a vector", i + 1)));
		element = TsdgArrayBytes(array, offset, size);
		TsdgCollectQuery(PointerGetDatum(element), i + 1, metric, dims, queries);
		offset += size;
	}
	return true;
}

void
TsdgCollectQueries(TsdgQueryArray *array, TsdgMetric metric, int dims, TsdgBatchQueries *queries)
{
	queries->count = array->count;
	queries->searchable = 0;
	queries->ordinal = palloc(sizeof(int) * Max(array->count, 1));
	if (array->streamed)
	{
		bool		collected = TsdgCollectStreamed(array, metric, dims, queries);

		if (array->slice != NULL)
			pfree(array->slice);
		array->slice = NULL;
		if (collected)
			return;
		queries->searchable = 0;
		TsdgDeconstructQueryArray(array);
	}
	for (int i = 0; i < array->count; i++)
		if (!array->nulls[i])
			TsdgCollectQuery(array->elems[i], i + 1, metric, dims, queries);
}
