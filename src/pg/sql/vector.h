/*
 * The vector type: a varlena of float4 values, laid out like pgvector's so
 * that the two read each other's binary form and users can switch.
 */
#ifndef TSDG_VECTOR_H
#define TSDG_VECTOR_H

#include "postgres.h"

#include "fmgr.h"

#define VECTOR_MAX_DIM 16000

#define VECTOR_SIZE(_dim)		(offsetof(Vector, x) + sizeof(float) * (_dim))
#define PG_GETARG_VECTOR_P(x)	DatumGetVector(PG_GETARG_DATUM(x))
#define PG_RETURN_VECTOR_P(x)	PG_RETURN_POINTER(x)

typedef struct Vector
{
	int32		vl_len_;		/* varlena header (do not touch directly!) */
	int16		dim;			/* number of dimensions */
	int16		unused;			/* reserved for future use, always zero */
	float		x[FLEXIBLE_ARRAY_MEMBER];
} Vector;

/*
 * A zeroed vector of dim dimensions, palloc'd in the current context; an
 * ERROR for a dimension count outside 1..VECTOR_MAX_DIM, so that no function
 * can make a vector that the rest of the code (and a dump) cannot read.
 */
extern Vector *InitVector(int dim);

extern void ReportMalformedVector(const Vector *vec) pg_attribute_noreturn();

/*
 * Every vector read from a datum is checked before use: its dimension count
 * sizes every copy into index pages and shared memory, so a value that
 * arrived malformed (on disk from a faulty writer, or built by hand in C)
 * must stop here with an ERROR rather than overrun a buffer.
 */
static inline Vector *
DatumGetVector(Datum datum)
{
	Vector	   *vec = (Vector *) PG_DETOAST_DATUM(datum);

	if (unlikely(vec->dim < 1 || vec->dim > VECTOR_MAX_DIM ||
				 VARSIZE(vec) != VECTOR_SIZE(vec->dim)))
		ReportMalformedVector(vec);
	return vec;
}

/* The L2 norm of dim floats, summed in double so that no float overflows. */
extern double FloatArrayNorm(const float *x, int dim);

#endif							/* TSDG_VECTOR_H */
