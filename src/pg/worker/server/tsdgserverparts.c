/*
 * The GPU server's side of a request in parts (runs in the GPU server
 * process): a session past maintenance_work_mem sends a build's rows or a
 * merge's inputs through a segment that holds a part of them, which the
 * worker copies into host arrays of its own (what the device computes from,
 * and the resident copy keeps: the worker's working memory), and takes the
 * graph back through it the same way. The turns are those of TsdgPartTurns;
 * where each part lies the request's kind computes from its checked sizes
 * (tsdgparts.c), never read from the segment.
 */
#include "postgres.h"

#include "storage/latch.h"

#include "tsdggpuserver.h"

/* the session's turn is checked for this often while it copies a part */
#define TSDG_PART_WAIT_MS	10

/*
 * Waits until the session's *counter reaches target; false when it gave the
 * request up (a cancel, its exit) or the worker shuts down. Searches queued
 * meanwhile go to the CPU, as during the build or merge.
 */
static bool
WaitForSession(TakenRequest *t, pg_atomic_uint64 *counter, uint64 target)
{
	while (pg_atomic_read_u64(counter) < target)
	{
		if (TsdgServerShutdownRequested || TsdgIpcCancelRequested(t->slot, t->copy.request_id))
			return false;
		TsdgTurnAwaySearches();
		TsdgServerNap(counter, target, TSDG_PART_WAIT_MS);
	}
	/* the session's part is read, or its reading done, only after its counter */
	pg_memory_barrier();
	return true;
}

/* the worker's turn is over: the session may take the next */
static void
EndTurn(TakenRequest *t, pg_atomic_uint64 *counter, uint64 value)
{
	pg_memory_barrier();
	pg_atomic_write_u64(counter, value);
	if (t->copy.requester_latch != NULL)
		SetLatch(t->copy.requester_latch);
}

bool
TsdgReceiveParts(TakenRequest *t, TsdgPartTurns *turns, void *base, const TsdgPartStream *in)
{
	int64		count = TsdgPartCount(in);

	for (int64 i = 0; i < count; i++)
	{
		if (!WaitForSession(t, &turns->in_sent, (uint64) i + 1))
			return false;
		TsdgCopyPart(in, base, i, false);
		EndTurn(t, &turns->in_taken, (uint64) i + 1);
	}
	return true;
}

bool
TsdgSendParts(TakenRequest *t, TsdgPartTurns *turns, void *base, const TsdgPartStream *out)
{
	int64		count = TsdgPartCount(out);

	for (int64 j = 0; j < count; j++)
	{
		if (!WaitForSession(t, &turns->out_taken, (uint64) j))
			return false;
		TsdgCopyPart(out, base, j, true);
		EndTurn(t, &turns->out_sent, (uint64) j + 1);
	}
	return WaitForSession(t, &turns->out_taken, (uint64) count);
}
