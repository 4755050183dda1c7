/*
 * Vector datums as the float rows the core builds from and searches:
 * checked against the index's dimensions, normalized for cosine.
 */
#include "postgres.h"

#include "utils/rel.h"

#include "tsdg.h"
#include "vector.h"

/* dimensions declared by the column's type modifier, or 0 when it has none */
int
TsdgIndexTypmodDims(Relation index)
{
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;

	return typmod > 0 ? typmod : 0;
}

/* the error for a row whose dimensions are not the index's */
void
TsdgWrongDimensions(Relation index, int dims, int index_dims)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_EXCEPTION),
			 errmsg("vector has %d dimensions, index \"%s\" has %d",
					dims, RelationGetRelationName(index), index_dims)));
}

/*
 * Copies the floats of a vector datum into out (room for dims floats),
 * normalized for cosine, and sets *vec_dims to the vector's dimensions.
 * False when it has other than dims dimensions (out untouched) or is a zero
 * vector under cosine, which has no direction and so no place in a cosine
 * index. Lets callers fill their arrays without a copy per vector.
 */
bool
TsdgCopyVector(Datum value, TsdgMetric metric, int dims, float *out, int *vec_dims)
{
	Vector	   *vec = DatumGetVector(value);
	bool		copied = vec->dim == dims;

	*vec_dims = vec->dim;
	if (copied)
		memcpy(out, vec->x, sizeof(float) * dims);
	if ((Pointer) vec != DatumGetPointer(value))
		pfree(vec);

	if (copied && metric == TSDG_METRIC_COSINE)
	{
		double		norm = FloatArrayNorm(out, dims);

		if (norm == 0.0)
			return false;
		for (int i = 0; i < dims; i++)
			out[i] = (float) (out[i] / norm);
	}
	return copied;
}

/*
 * The floats of a vector datum in a fresh palloc'd array, normalized for
 * cosine. Returns NULL for a zero vector under cosine (see TsdgCopyVector).
 */
float *
TsdgPrepareVector(Datum value, TsdgMetric metric, int *dims)
{
	Vector	   *vec = DatumGetVector(value);
	float	   *out = palloc(sizeof(float) * vec->dim);

	if (!TsdgCopyVector(PointerGetDatum(vec), metric, vec->dim, out, dims))
	{
		pfree(out);
		out = NULL;
	}
	if ((Pointer) vec != DatumGetPointer(value))
		pfree(vec);
	return out;
}
