/*
 * The vector type: text and binary I/O, typmod, casts, distances, element-wise
 * arithmetic, comparison and aggregates. Behaves like pgvector's vector, so
 * pgvector users can switch; the distances run the core's SIMD kernels.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/lsyscache.h"

#include "tsdg_capi.h"
#include "vector.h"

/* Element 0 of the avg() state is the row count, then one sum per dimension. */
#define STATE_DIMS(a)	(ARR_DIMS(a)[0] - 1)

static inline void
CheckDim(int64 dim)
{
	if (dim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension")));
	if (dim > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vector cannot have more than %d dimensions", VECTOR_MAX_DIM)));
}

Vector *
InitVector(int dim)
{
	Size		size;
	Vector	   *result;

	CheckDim(dim);
	size = VECTOR_SIZE(dim);
	result = (Vector *) palloc0(size);
	SET_VARSIZE(result, size);
	result->dim = dim;
	return result;
}

void
ReportMalformedVector(const Vector *vec)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("malformed vector value: %d dimensions in %u bytes",
					vec->dim, (unsigned int) VARSIZE(vec))));
}

double
FloatArrayNorm(const float *x, int dim)
{
	double		sum = 0.0;

	for (int i = 0; i < dim; i++)
		sum += (double) x[i] * (double) x[i];
	return sqrt(sum);
}

/* typmod -1 means vector without (n): any dimension is accepted. */
static inline void
CheckExpectedDim(int32 typmod, int dim)
{
	if (typmod != -1 && typmod != dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", typmod, dim)));
}

static inline void
CheckElement(float value)
{
	if (isnan(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("NaN not allowed in vector")));
	if (isinf(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("infinite value not allowed in vector")));
}

static inline void
CheckDims(const Vector *a, const Vector *b)
{
	if (a->dim != b->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", a->dim, b->dim)));
}

/* The whitespace array_in accepts, without depending on the locale. */
static inline bool
VectorIsSpace(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static void InvalidVectorSyntax(const char *literal, const char *detail) pg_attribute_noreturn();

static void
InvalidVectorSyntax(const char *literal, const char *detail)
{
	if (detail)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid input syntax for type vector: \"%s\"", literal),
				 errdetail("%s", detail)));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type vector: \"%s\"", literal)));
}

/* ---- I/O ---- */

PG_FUNCTION_INFO_V1(vector_in);
Datum
vector_in(PG_FUNCTION_ARGS)
{
	char	   *literal = PG_GETARG_CSTRING(0);
	int32		typmod = PG_GETARG_INT32(2);
	const char *pt = literal;
	int			capacity = 64;
	float	   *values = palloc(sizeof(float) * capacity);
	int			dim = 0;
	Vector	   *result;

	while (VectorIsSpace(*pt))
		pt++;
	if (*pt != '[')
		InvalidVectorSyntax(literal, "Vector contents must start with \"[\".");
	pt++;
	while (VectorIsSpace(*pt))
		pt++;
	if (*pt == ']')
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension")));

	for (;;)
	{
		char	   *end;
		float		value;

		if (dim == VECTOR_MAX_DIM)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vector cannot have more than %d dimensions", VECTOR_MAX_DIM)));
		while (VectorIsSpace(*pt))
			pt++;
		/* strtof skips leading whitespace itself and would accept "[1, ]" */
		if (*pt == '\0' || *pt == ',' || *pt == ']')
			InvalidVectorSyntax(literal, NULL);

		/* strtof, like float4in, so a value is rounded to float only once */
		errno = 0;
		value = strtof(pt, &end);
		if (end == pt)
			InvalidVectorSyntax(literal, NULL);
		if (errno == ERANGE && isinf(value))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("\"%s\" is out of range for type vector",
							pnstrdup(pt, end - pt))));
		CheckElement(value);

		if (dim == capacity)
		{
			capacity *= 2;
			values = repalloc(values, sizeof(float) * capacity);
		}
		values[dim++] = value;

		pt = end;
		while (VectorIsSpace(*pt))
			pt++;
		if (*pt == ',')
			pt++;
		else if (*pt == ']')
		{
			pt++;
			break;
		}
		else
			InvalidVectorSyntax(literal, NULL);
	}

	while (VectorIsSpace(*pt))
		pt++;
	if (*pt != '\0')
		InvalidVectorSyntax(literal, "Junk after closing right brace.");

	CheckExpectedDim(typmod, dim);
	result = InitVector(dim);
	memcpy(result->x, values, sizeof(float) * dim);
	pfree(values);
	PG_RETURN_VECTOR_P(result);
}

/* Shortest text that reads back as the same float, like pgvector and float4out. */
PG_FUNCTION_INFO_V1(vector_out);
Datum
vector_out(PG_FUNCTION_ARGS)
{
	Vector	   *vector = PG_GETARG_VECTOR_P(0);
	char	   *buf = palloc((FLOAT_SHORTEST_DECIMAL_LEN + 1) * vector->dim + 2);
	char	   *ptr = buf;

	*ptr++ = '[';
	for (int i = 0; i < vector->dim; i++)
	{
		if (i > 0)
			*ptr++ = ',';
		ptr += float_to_shortest_decimal_bufn(vector->x[i], ptr);
	}
	*ptr++ = ']';
	*ptr = '\0';

	PG_FREE_IF_COPY(vector, 0);
	PG_RETURN_CSTRING(buf);
}

PG_FUNCTION_INFO_V1(vector_typmod_in);
Datum
vector_typmod_in(PG_FUNCTION_ARGS)
{
	ArrayType  *modifiers = PG_GETARG_ARRAYTYPE_P(0);
	int32	   *values;
	int			n;

	values = ArrayGetIntegerTypmods(modifiers, &n);
	if (n != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid type modifier")));
	if (values[0] < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type vector must be at least 1")));
	if (values[0] > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type vector cannot exceed %d", VECTOR_MAX_DIM)));
	PG_RETURN_INT32(values[0]);
}

/* Binary form: int16 dim, int16 unused (0), dim float4, network byte order. */
PG_FUNCTION_INFO_V1(vector_recv);
Datum
vector_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int32		typmod = PG_GETARG_INT32(2);
	int16		dim = pq_getmsgint(buf, sizeof(int16));
	int16		unused = pq_getmsgint(buf, sizeof(int16));
	Vector	   *result;

	CheckDim(dim);
	CheckExpectedDim(typmod, dim);
	if (unused != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("expected unused to be 0, not %d", unused)));

	result = InitVector(dim);
	for (int i = 0; i < dim; i++)
	{
		result->x[i] = pq_getmsgfloat4(buf);
		CheckElement(result->x[i]);
	}
	PG_RETURN_VECTOR_P(result);
}

PG_FUNCTION_INFO_V1(vector_send);
Datum
vector_send(PG_FUNCTION_ARGS)
{
	Vector	   *vec = PG_GETARG_VECTOR_P(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint16(&buf, vec->dim);
	pq_sendint16(&buf, vec->unused);
	for (int i = 0; i < vec->dim; i++)
		pq_sendfloat4(&buf, vec->x[i]);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/* ---- casts ---- */

/* vector -> vector(n): the length coercion that enforces the typmod */
PG_FUNCTION_INFO_V1(vector);
Datum
vector(PG_FUNCTION_ARGS)
{
	Vector	   *vec = PG_GETARG_VECTOR_P(0);
	int32		typmod = PG_GETARG_INT32(1);

	CheckExpectedDim(typmod, vec->dim);
	PG_RETURN_VECTOR_P(vec);
}

PG_FUNCTION_INFO_V1(array_to_vector);
Datum
array_to_vector(PG_FUNCTION_ARGS)
{
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(0);
	int32		typmod = PG_GETARG_INT32(1);
	Oid			element_type = ARR_ELEMTYPE(array);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elements;
	int			count;
	Vector	   *result;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("array must be 1-D")));
	if (array_contains_nulls(array))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array must not contain nulls")));

	get_typlenbyvalalign(element_type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, element_type, typlen, typbyval, typalign, &elements, NULL, &count);
	CheckDim(count);
	CheckExpectedDim(typmod, count);

	result = InitVector(count);
	for (int i = 0; i < count; i++)
	{
		switch (element_type)
		{
			case INT4OID:
				result->x[i] = (float) DatumGetInt32(elements[i]);
				break;
			case FLOAT8OID:
				result->x[i] = (float) DatumGetFloat8(elements[i]);
				break;
			case FLOAT4OID:
				result->x[i] = DatumGetFloat4(elements[i]);
				break;
			case NUMERICOID:
				result->x[i] = DatumGetFloat4(DirectFunctionCall1(numeric_float4, elements[i]));
				break;
			default:
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg("unsupported array type %s", format_type_be(element_type))));
		}
		CheckElement(result->x[i]);
	}
	pfree(elements);
	PG_RETURN_VECTOR_P(result);
}

PG_FUNCTION_INFO_V1(vector_to_float4);
Datum
vector_to_float4(PG_FUNCTION_ARGS)
{
	Vector	   *vec = PG_GETARG_VECTOR_P(0);
	Datum	   *datums = palloc(sizeof(Datum) * vec->dim);
	ArrayType  *result;

	for (int i = 0; i < vec->dim; i++)
		datums[i] = Float4GetDatum(vec->x[i]);
	result = construct_array(datums, vec->dim, FLOAT4OID, sizeof(float4), true, TYPALIGN_INT);
	pfree(datums);
	PG_RETURN_POINTER(result);
}

/* ---- distances, all through the core kernels ---- */

/*
 * The core's kernel sums in float, like pgvector; when a squared norm
 * overflows float (elements past about 1e17) it would answer NaN or a wrong
 * cosine, so those vectors are summed again in double.
 */
static double
CosineDistance(const Vector *a, const Vector *b)
{
	double		dot = 0.0;
	double		cosine;

	if (isfinite(tsdg_norm_squared(a->x, a->dim)) && isfinite(tsdg_norm_squared(b->x, b->dim)))
		return tsdg_cosine_distance(a->x, b->x, a->dim);

	for (int i = 0; i < a->dim; i++)
		dot += (double) a->x[i] * (double) b->x[i];
	cosine = dot / (FloatArrayNorm(a->x, a->dim) * FloatArrayNorm(b->x, b->dim));
	return 1.0 - Max(-1.0, Min(1.0, cosine));
}

/* A float8 function of two vectors of the same dimension: a, b in scope. */
#define VECTOR_DISTANCE(name, result) \
PG_FUNCTION_INFO_V1(name); \
Datum \
name(PG_FUNCTION_ARGS) \
{ \
	Vector	   *a = PG_GETARG_VECTOR_P(0); \
	Vector	   *b = PG_GETARG_VECTOR_P(1); \
\
	CheckDims(a, b); \
	PG_RETURN_FLOAT8(result); \
}

VECTOR_DISTANCE(l2_distance, sqrt((double) tsdg_l2_squared_distance(a->x, b->x, a->dim)))
/* what the index orders by for <->: the order of l2_distance without the sqrt */
VECTOR_DISTANCE(vector_l2_squared_distance, tsdg_l2_squared_distance(a->x, b->x, a->dim))
VECTOR_DISTANCE(inner_product, tsdg_inner_product(a->x, b->x, a->dim))
/* <#>: negated so that ascending order puts the largest inner product first */
VECTOR_DISTANCE(vector_negative_inner_product, -(double) tsdg_inner_product(a->x, b->x, a->dim))
/* NaN when either vector is zero, like pgvector */
VECTOR_DISTANCE(cosine_distance, CosineDistance(a, b))
VECTOR_DISTANCE(l1_distance, tsdg_l1_distance(a->x, b->x, a->dim))

/* ---- functions ---- */

PG_FUNCTION_INFO_V1(vector_dims);
Datum
vector_dims(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	PG_RETURN_INT32(a->dim);
}

PG_FUNCTION_INFO_V1(l2_norm);
Datum
l2_norm(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	PG_RETURN_FLOAT8(FloatArrayNorm(a->x, a->dim));
}

/* A zero vector stays zero. */
PG_FUNCTION_INFO_V1(l2_normalize);
Datum
l2_normalize(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	double		norm = FloatArrayNorm(a->x, a->dim);
	Vector	   *result = InitVector(a->dim);

	if (norm > 0)
	{
		for (int i = 0; i < a->dim; i++)
			result->x[i] = (float) (a->x[i] / norm);
	}
	PG_RETURN_VECTOR_P(result);
}

/* count dimensions from start (1-based), clipped to the vector like substring */
PG_FUNCTION_INFO_V1(subvector);
Datum
subvector(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	int32		start = PG_GETARG_INT32(1);
	int32		count = PG_GETARG_INT32(2);
	int64		first = Max((int64) start, 1);
	int64		end = Min((int64) start + count, (int64) a->dim + 1);
	Vector	   *result;

	if (count < 1 || end - first < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension")));

	result = InitVector((int) (end - first));
	memcpy(result->x, a->x + (first - 1), sizeof(float) * result->dim);
	PG_RETURN_VECTOR_P(result);
}

/* a || b: the dimensions of a, then those of b */
PG_FUNCTION_INFO_V1(vector_concat);
Datum
vector_concat(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	Vector	   *result;

	CheckDim((int64) a->dim + b->dim);
	result = InitVector(a->dim + b->dim);
	memcpy(result->x, a->x, sizeof(float) * a->dim);
	memcpy(result->x + a->dim, b->x, sizeof(float) * b->dim);
	PG_RETURN_VECTOR_P(result);
}

/* ---- element-wise arithmetic ---- */

typedef enum ElementOp
{
	ELEMENT_ADD,
	ELEMENT_SUB,
	ELEMENT_MUL
} ElementOp;

/* Overflow to infinity and (for *) underflow to zero are errors, like float4. */
static Vector *
ElementWise(const Vector *a, const Vector *b, ElementOp op)
{
	Vector	   *result;

	CheckDims(a, b);
	result = InitVector(a->dim);
	for (int i = 0; i < a->dim; i++)
	{
		float		x = a->x[i];
		float		y = b->x[i];
		float		r = op == ELEMENT_ADD ? x + y : op == ELEMENT_SUB ? x - y : x * y;

		if (isinf(r))
			float_overflow_error();
		if (op == ELEMENT_MUL && r == 0 && x != 0 && y != 0)
			float_underflow_error();
		result->x[i] = r;
	}
	return result;
}

PG_FUNCTION_INFO_V1(vector_add);
Datum
vector_add(PG_FUNCTION_ARGS)
{
	PG_RETURN_VECTOR_P(ElementWise(PG_GETARG_VECTOR_P(0), PG_GETARG_VECTOR_P(1), ELEMENT_ADD));
}

PG_FUNCTION_INFO_V1(vector_sub);
Datum
vector_sub(PG_FUNCTION_ARGS)
{
	PG_RETURN_VECTOR_P(ElementWise(PG_GETARG_VECTOR_P(0), PG_GETARG_VECTOR_P(1), ELEMENT_SUB));
}

PG_FUNCTION_INFO_V1(vector_mul);
Datum
vector_mul(PG_FUNCTION_ARGS)
{
	PG_RETURN_VECTOR_P(ElementWise(PG_GETARG_VECTOR_P(0), PG_GETARG_VECTOR_P(1), ELEMENT_MUL));
}

/* ---- comparison: element by element, then the shorter vector first ---- */

static int
vector_cmp_internal(const Vector *a, const Vector *b)
{
	int			dim = Min(a->dim, b->dim);

	for (int i = 0; i < dim; i++)
	{
		if (a->x[i] < b->x[i])
			return -1;
		if (a->x[i] > b->x[i])
			return 1;
	}
	if (a->dim != b->dim)
		return a->dim < b->dim ? -1 : 1;
	return 0;
}

#define VECTOR_COMPARISON(name, test) \
PG_FUNCTION_INFO_V1(name); \
Datum \
name(PG_FUNCTION_ARGS) \
{ \
	Vector	   *a = PG_GETARG_VECTOR_P(0); \
	Vector	   *b = PG_GETARG_VECTOR_P(1); \
	int			cmp = vector_cmp_internal(a, b); \
\
	PG_RETURN_BOOL(test); \
}

VECTOR_COMPARISON(vector_lt, cmp < 0)
VECTOR_COMPARISON(vector_le, cmp <= 0)
VECTOR_COMPARISON(vector_eq, cmp == 0)
VECTOR_COMPARISON(vector_ne, cmp != 0)
VECTOR_COMPARISON(vector_ge, cmp >= 0)
VECTOR_COMPARISON(vector_gt, cmp > 0)

PG_FUNCTION_INFO_V1(vector_cmp);
Datum
vector_cmp(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);

	PG_RETURN_INT32(vector_cmp_internal(a, b));
}

/* ---- avg(vector): a float8[] state {count, sum_1, ..., sum_dim} ---- */

/*
 * The state functions are callable from SQL with any float8[], so a state is
 * checked like input: a row count that is a whole number of rows, and once
 * it counts rows, as many sums as a vector may have dimensions. Sums that
 * are not finite are caught where the average is formed.
 */
static float8 *
CheckStateArray(ArrayType *state, const char *caller)
{
	float8	   *values;

	if (ARR_NDIM(state) != 1 || ARR_DIMS(state)[0] < 1 || ARR_HASNULL(state) ||
		ARR_ELEMTYPE(state) != FLOAT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: expected a one-dimensional float8 state array without nulls", caller)));
	values = (float8 *) ARR_DATA_PTR(state);
	if (!(values[0] >= 0 && values[0] <= (float8) PG_INT64_MAX) || values[0] != floor(values[0]))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: state row count must be a non-negative whole number", caller)));
	if (values[0] > 0)
		CheckDim(STATE_DIMS(state));
	return values;
}

static ArrayType *
MakeState(float8 count, const float8 *sums, int dim)
{
	Datum	   *datums = palloc(sizeof(Datum) * (dim + 1));
	ArrayType  *result;

	datums[0] = Float8GetDatum(count);
	for (int i = 0; i < dim; i++)
		datums[i + 1] = Float8GetDatum(sums[i]);
	result = construct_array(datums, dim + 1, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
							 TYPALIGN_DOUBLE);
	pfree(datums);
	return result;
}

PG_FUNCTION_INFO_V1(vector_accum);
Datum
vector_accum(PG_FUNCTION_ARGS)
{
	ArrayType  *state = PG_GETARG_ARRAYTYPE_P(0);
	Vector	   *value = PG_GETARG_VECTOR_P(1);
	float8	   *values = CheckStateArray(state, "vector_accum");
	float8	   *sums;
	ArrayType  *result;

	if (STATE_DIMS(state) == 0)
	{
		/* the first row sets the dimension of the state */
		sums = palloc(sizeof(float8) * value->dim);
		for (int i = 0; i < value->dim; i++)
			sums[i] = value->x[i];
		result = MakeState(1, sums, value->dim);
		pfree(sums);
		PG_RETURN_ARRAYTYPE_P(result);
	}

	if (STATE_DIMS(state) != value->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", STATE_DIMS(state), value->dim)));

	/*
	 * Called as an aggregate, the state is ours (nodeAgg keeps it in the
	 * aggregate context), so it is updated in place like float8_accum does,
	 * instead of building a new array for every row. Anywhere else, copy.
	 */
	if (!AggCheckCallContext(fcinfo, NULL))
	{
		state = MakeState(values[0], values + 1, STATE_DIMS(state));
		values = (float8 *) ARR_DATA_PTR(state);
	}
	values[0] += 1;
	for (int i = 0; i < value->dim; i++)
	{
		values[i + 1] += value->x[i];
		if (isinf(values[i + 1]))
			float_overflow_error();
	}
	PG_RETURN_ARRAYTYPE_P(state);
}

/* Merges two partial avg() states (parallel aggregation). */
PG_FUNCTION_INFO_V1(vector_combine);
Datum
vector_combine(PG_FUNCTION_ARGS)
{
	ArrayType  *state1 = PG_GETARG_ARRAYTYPE_P(0);
	ArrayType  *state2 = PG_GETARG_ARRAYTYPE_P(1);
	float8	   *values1 = CheckStateArray(state1, "vector_combine");
	float8	   *values2 = CheckStateArray(state2, "vector_combine");
	int			dim = STATE_DIMS(state1);
	float8	   *sums;
	ArrayType  *result;

	if (values1[0] == 0)
		PG_RETURN_ARRAYTYPE_P(MakeState(values2[0], values2 + 1, STATE_DIMS(state2)));
	if (values2[0] == 0)
		PG_RETURN_ARRAYTYPE_P(MakeState(values1[0], values1 + 1, dim));
	if (STATE_DIMS(state2) != dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", dim, STATE_DIMS(state2))));

	sums = palloc(sizeof(float8) * dim);
	for (int i = 0; i < dim; i++)
	{
		sums[i] = values1[i + 1] + values2[i + 1];
		if (isinf(sums[i]))
			float_overflow_error();
	}
	result = MakeState(values1[0] + values2[0], sums, dim);
	pfree(sums);
	PG_RETURN_ARRAYTYPE_P(result);
}

PG_FUNCTION_INFO_V1(vector_avg);
Datum
vector_avg(PG_FUNCTION_ARGS)
{
	ArrayType  *state = PG_GETARG_ARRAYTYPE_P(0);
	float8	   *values = CheckStateArray(state, "vector_avg");
	float8		count = values[0];
	Vector	   *result;

	/* SQL defines the average of no rows as NULL */
	if (count == 0)
		PG_RETURN_NULL();

	result = InitVector(STATE_DIMS(state));
	for (int i = 0; i < result->dim; i++)
	{
		result->x[i] = (float) (values[i + 1] / count);
		CheckElement(result->x[i]);
	}
	PG_RETURN_VECTOR_P(result);
}
