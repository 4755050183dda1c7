/*
 * Rows with identical vectors, linked in the search graph.
 *
 * Diversification keeps an edge only when no kept neighbor is nearer to its
 * target than the node itself (the occlusion rule of TSDG): among identical
 * vectors every distance is zero, so each copy keeps at most one edge to the
 * others, and a walk from the entry points reaches only some of the copies.
 * A query equal to them would then see the rest only after every reachable
 * row, out of order. Each group of copies is therefore linked into a ring,
 * every copy's list giving one slot (a free one if it has any, else its last)
 * to the next copy, with the smallest occlusion factor so that every search
 * follows it: reaching one copy reaches them all, nearest first.
 *
 * The groups need the rows only, so a build on the GPU worker finds them on
 * the core's threads (tsdg_identical_rows_job_*) while it writes its row
 * pages and the worker builds the graph, and links them once it has it.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "tsdg.h"

/* the job running in this backend, stopped at an error or at exit */
static TsdgIdenticalRowsJob *running_job = NULL;
static bool exit_hook_set = false;

static void
TsdgStopFindingDuplicatesAtExit(int code, Datum arg)
{
	TsdgStopFindingDuplicates();
}

/*
 * Starts finding the groups of identical rows among rows (n * dims), which
 * must stay as they are until TsdgFinishFindingDuplicates or
 * TsdgStopFindingDuplicates. One search at a time.
 */
void
TsdgStartFindingDuplicates(const float *rows, int64 n, int dims)
{
	TsdgError	error;

	Assert(running_job == NULL);
	if (!exit_hook_set)
	{
		before_shmem_exit(TsdgStopFindingDuplicatesAtExit, (Datum) 0);
		exit_hook_set = true;
	}
	running_job = tsdg_identical_rows_job_start(rows, n, dims, &error);
	if (running_job == NULL)
		ereport(ERROR,
				(errmsg("could not start finding identical rows: %s", error.message)));
}

/*
 * The groups of identical rows the running search found: their ids in id
 * order, group after group. NULL when every row is unique. Waits for the
 * search, answering interrupts; *seconds is the time the search took.
 */
TsdgDuplicateGroups *
TsdgFinishFindingDuplicates(double *seconds)
{
	TsdgDuplicateGroups *groups = NULL;
	TsdgIdenticalRowsJob *job;
	TsdgError	error;
	int64		group_count;
	int64		group_rows;

	Assert(running_job != NULL);
	while (!tsdg_identical_rows_job_done(running_job))
	{
		CHECK_FOR_INTERRUPTS();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	job = running_job;
	running_job = NULL;
	if (tsdg_identical_rows_job_wait(job, &group_count, &group_rows, seconds, &error) != TSDG_OK)
		ereport(ERROR, (errmsg("could not find identical rows: %s", error.message)));
	if (group_count == 0)
	{
		tsdg_identical_rows_job_take(job, NULL, NULL);
		return NULL;
	}
	groups = palloc0(sizeof(TsdgDuplicateGroups));
	groups->rows = group_rows;
	groups->groups = group_count;
	groups->ids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * group_rows);
	groups->ends = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int64) * group_count);
	tsdg_identical_rows_job_take(job, groups->ids, groups->ends);
	return groups;
}

/* Stops the running search, if any. */
void
TsdgStopFindingDuplicates(void)
{
	TsdgIdenticalRowsJob *job = running_job;

	running_job = NULL;
	tsdg_identical_rows_job_cancel(job);
}

/* Gives node from's list an edge to node to, unless it has one. */
static void
TsdgLinkCopy(uint32 *list, uint8 *lambdas, int degree, uint32 to)
{
	int			slot = degree - 1;

	for (int i = 0; i < degree; i++)
	{
		if (list[i] == to)
			return;
		if (list[i] == TSDG_INVALID_ID)
		{
			slot = i;
			break;
		}
	}
	list[slot] = to;
	lambdas[slot] = 0;
}

/* Links each group of groups into a ring in neighbors and lambdas (n * degree). */
void
TsdgLinkDuplicates(const TsdgDuplicateGroups *groups, uint32 *neighbors, uint8 *lambdas,
				   int degree)
{
	int64		start = 0;

	if (groups == NULL || degree < 1)
		return;
	for (int64 g = 0; g < groups->groups; g++)
	{
		int64		end = groups->ends[g];

		for (int64 i = start; i < end; i++)
		{
			uint32		from = groups->ids[i];
			uint32		to = groups->ids[i + 1 < end ? i + 1 : start];

			TsdgLinkCopy(neighbors + (Size) from * degree, lambdas + (Size) from * degree,
						 degree, to);
		}
		start = end;
	}
}
