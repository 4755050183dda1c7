/*
 * The tsdg index access method: handler, reloptions, GUCs.
 */
#include "postgres.h"

#include "access/amapi.h"
#include "access/reloptions.h"
#include "commands/progress.h"
#include "commands/vacuum.h"
#include "utils/guc.h"

#include "pg_tsdg.h"
#include "tsdg.h"

int			tsdg_ef_search = TSDG_DEFAULT_EF_SEARCH;
int			tsdg_lambda_search = TSDG_LAMBDA_LIMIT_ALL;
int			tsdg_max_scan_tuples = TSDG_DEFAULT_MAX_SCAN_TUPLES;
int			tsdg_iterative_scan = TSDG_ITERATIVE_SCAN_RELAXED;
double		tsdg_scan_mem_multiplier = 1.0;
int			tsdg_device = TSDG_DEVICE_AUTO;

static relopt_kind tsdg_relopt_kind;

static const struct config_enum_entry tsdg_iterative_scan_options[] = {
	{"off", TSDG_ITERATIVE_SCAN_OFF, false},
	{"relaxed_order", TSDG_ITERATIVE_SCAN_RELAXED, false},
	{"strict_order", TSDG_ITERATIVE_SCAN_STRICT, false},
	{NULL, 0, false}
};

static const struct config_enum_entry tsdg_device_options[] = {
	{"auto", TSDG_DEVICE_AUTO, false},
	{"cpu", TSDG_DEVICE_CPU, false},
	{"gpu", TSDG_DEVICE_GPU, false},
	{NULL, 0, false}
};

/* Registers the reloptions and GUCs of the access method; called by _PG_init. */
void
TsdgInit(void)
{
	TsdgBuildParams defaults;

	tsdg_build_params_default(&defaults);
	defaults.build_k = TSDG_DEFAULT_BUILD_K;

	tsdg_relopt_kind = add_reloption_kind();
	add_int_reloption(tsdg_relopt_kind, "degree",
					  "Neighbors stored per node (R)",
					  defaults.degree, TSDG_MIN_DEGREE, TSDG_MAX_DEGREE, AccessExclusiveLock);
	add_int_reloption(tsdg_relopt_kind, "build_k",
					  "Neighbors per list of the k-NN graph built by GNND",
					  defaults.build_k, TSDG_MIN_BUILD_K, TSDG_MAX_BUILD_K, AccessExclusiveLock);
	add_int_reloption(tsdg_relopt_kind, "samples",
					  "GNND samples per list and iteration (p); 0: half of build_k, a quarter for a CPU build of fewer than 500,000 rows",
					  defaults.samples, TSDG_MIN_SAMPLES, TSDG_MAX_SAMPLES, AccessExclusiveLock);
	add_int_reloption(tsdg_relopt_kind, "iterations",
					  "Maximum GNND iterations",
					  defaults.iterations, TSDG_MIN_ITERATIONS, TSDG_MAX_ITERATIONS,
					  AccessExclusiveLock);
	add_real_reloption(tsdg_relopt_kind, "alpha",
					   "Relaxation factor of the first diversification stage",
					   defaults.alpha, TSDG_MIN_ALPHA, TSDG_MAX_ALPHA, AccessExclusiveLock);
	add_int_reloption(tsdg_relopt_kind, "lambda0",
					  "Largest occlusion factor an edge may have to be kept",
					  defaults.lambda0, TSDG_MIN_LAMBDA0, TSDG_MAX_LAMBDA0, AccessExclusiveLock);

	DefineCustomIntVariable("tsdg.ef_search",
							"Sets the candidate list length of a tsdg index search.",
							"Larger values find more of the true nearest rows and take longer.",
							&tsdg_ef_search, TSDG_DEFAULT_EF_SEARCH,
							TSDG_MIN_EF_SEARCH, TSDG_MAX_EF_SEARCH,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.lambda_search",
							"Sets the largest occlusion factor of the edges a search follows.",
							"Smaller values follow fewer, more diverse edges per node.",
							&tsdg_lambda_search, TSDG_LAMBDA_LIMIT_ALL, 0, TSDG_LAMBDA_LIMIT_ALL,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.max_scan_tuples",
							"Sets how many rows one tsdg index scan returns from its graph search before it scores the rows left exactly.",
							"A scan whose rows are filtered out widens its search until this many rows were returned; then every row it did not return is scored, so an ordered scan returns every row.",
							&tsdg_max_scan_tuples, TSDG_DEFAULT_MAX_SCAN_TUPLES, 1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("tsdg.iterative_scan",
							 "Sets what a tsdg index scan does past its first tsdg.ef_search rows.",
							 "off ends the scan there; relaxed_order goes on and returns every row, those its wider searches find in the order they are found; strict_order goes on but leaves out rows nearer than one already returned.",
							 &tsdg_iterative_scan, TSDG_ITERATIVE_SCAN_RELAXED, tsdg_iterative_scan_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("tsdg.scan_mem_multiplier",
							 "Sets the multiple of work_mem a tsdg index scan's graph search may use.",
							 "Past it, the scan scores the rows it did not return exactly, as at tsdg.max_scan_tuples.",
							 &tsdg_scan_mem_multiplier, 1.0,
							 TSDG_MIN_SCAN_MEM_MULTIPLIER, TSDG_MAX_SCAN_MEM_MULTIPLIER,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.navigating_cache_mem",
							"Sets the memory a session may keep the rows of its tsdg indexes' navigating sets in.",
							"Every graph search scores its index's navigating set first; a session keeps those rows between scans, for all its indexes together, and reads a set larger than this from the index pages at every scan.",
							&tsdg_navigating_cache_mem, TSDG_DEFAULT_NAVIGATING_CACHE_MEM, 0, MAX_KILOBYTES,
							PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomEnumVariable("tsdg.device",
							 "Sets where tsdg index builds and searches run.",
							 "auto uses the GPU worker when it is running and the CPU otherwise.",
							 &tsdg_device, TSDG_DEVICE_AUTO, tsdg_device_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);

	TsdgMergeInit();
	MarkGUCPrefixReserved("tsdg");
}

static char *
tsdgbuildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case TSDG_PROGRESS_LOAD:
			return "loading tuples";
		case TSDG_PROGRESS_KNN:
			return "building k-NN graph";
		case TSDG_PROGRESS_DIVERSIFY:
			return "diversifying";
		case TSDG_PROGRESS_WRITE:
			return "writing pages";
		case TSDG_PROGRESS_LAYER:
			return "building navigating layer";
		default:
			return NULL;
	}
}

static bytea *
tsdgoptions(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"degree", RELOPT_TYPE_INT, offsetof(TsdgOptions, degree)},
		{"build_k", RELOPT_TYPE_INT, offsetof(TsdgOptions, build_k)},
		{"samples", RELOPT_TYPE_INT, offsetof(TsdgOptions, samples)},
		{"iterations", RELOPT_TYPE_INT, offsetof(TsdgOptions, iterations)},
		{"alpha", RELOPT_TYPE_REAL, offsetof(TsdgOptions, alpha)},
		{"lambda0", RELOPT_TYPE_INT, offsetof(TsdgOptions, lambda0)},
	};
	TsdgOptions *opts;

	opts = (TsdgOptions *) build_reloptions(reloptions, validate, tsdg_relopt_kind,
											sizeof(TsdgOptions), tab, lengthof(tab));
	if (validate && opts != NULL && opts->samples > opts->build_k)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("samples (%d) must not exceed build_k (%d)", opts->samples, opts->build_k)));
	return (bytea *) opts;
}

static bool
tsdgvalidate(Oid opclassoid)
{
	return true;
}

PG_FUNCTION_INFO_V1(tsdghandler);
Datum
tsdghandler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *amroutine = makeNode(IndexAmRoutine);

	amroutine->amstrategies = 0;
	amroutine->amsupport = 1;
	amroutine->amoptsprocnum = 0;
	amroutine->amcanorder = false;
	amroutine->amcanorderbyop = true;
	amroutine->amcanbackward = false;
	amroutine->amcanunique = false;
	amroutine->amcanmulticol = false;
	amroutine->amoptionalkey = true;
	amroutine->amsearcharray = false;
	amroutine->amsearchnulls = false;
	amroutine->amstorage = false;
	amroutine->amclusterable = false;
	amroutine->ampredlocks = false;
	amroutine->amcanparallel = false;
	amroutine->amcaninclude = false;
	amroutine->amusemaintenanceworkmem = false;
	amroutine->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL;
	amroutine->amkeytype = InvalidOid;

	amroutine->ambuild = tsdgbuild;
	amroutine->ambuildempty = tsdgbuildempty;
	amroutine->aminsert = tsdginsert;
	amroutine->ambulkdelete = tsdgbulkdelete;
	amroutine->amvacuumcleanup = tsdgvacuumcleanup;
	amroutine->amcanreturn = NULL;
	amroutine->amcostestimate = tsdgcostestimate;
	amroutine->amoptions = tsdgoptions;
	amroutine->amproperty = NULL;
	amroutine->ambuildphasename = tsdgbuildphasename;
	amroutine->amvalidate = tsdgvalidate;
	amroutine->amadjustmembers = NULL;
	amroutine->ambeginscan = tsdgbeginscan;
	amroutine->amrescan = tsdgrescan;
	amroutine->amgettuple = tsdggettuple;
	amroutine->amgetbitmap = NULL;
	amroutine->amendscan = tsdgendscan;
	amroutine->ammarkpos = NULL;
	amroutine->amrestrpos = NULL;
	amroutine->amestimateparallelscan = NULL;
	amroutine->aminitparallelscan = NULL;
	amroutine->amparallelrescan = NULL;

	PG_RETURN_POINTER(amroutine);
}

/* support function 1 of each operator class: the metric it orders by */
PG_FUNCTION_INFO_V1(tsdg_metric_l2);
Datum
tsdg_metric_l2(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(TSDG_METRIC_L2);
}

PG_FUNCTION_INFO_V1(tsdg_metric_inner_product);
Datum
tsdg_metric_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(TSDG_METRIC_INNER_PRODUCT);
}

PG_FUNCTION_INFO_V1(tsdg_metric_cosine);
Datum
tsdg_metric_cosine(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(TSDG_METRIC_COSINE);
}

PG_FUNCTION_INFO_V1(tsdg_metric_l1);
Datum
tsdg_metric_l1(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(TSDG_METRIC_L1);
}
