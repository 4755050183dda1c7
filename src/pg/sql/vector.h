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
#define DatumGetVector(x)		((Vector *) PG_DETOAST_DATUM(x))
#define PG_GETARG_VECTOR_P(x)	DatumGetVector(PG_GETARG_DATUM(x))
#define PG_RETURN_VECTOR_P(x)	PG_RETURN_POINTER(x)

typedef struct Vector
{
	int32		vl_len_;		/* varlena header (do not touch directly!) */
	int16		dim;			/* number of dimensions */
	int16		unused;			/* reserved for future use, always zero */
	float		x[FLEXIBLE_ARRAY_MEMBER];
} Vector;

/* A zeroed vector of dim dimensions, palloc'd in the current context. */
extern Vector *InitVector(int dim);

#endif							/* TSDG_VECTOR_H */
