/*
 * Temporary files for the large arrays of a build past maintenance_work_mem.
 * The arrays (the rows, the k-NN lists, the graph, and the core's own working
 * arrays while it builds) are files in the temporary tablespace, each mapped
 * shared and unlinked as soon as it is made (tsdg_capi.h): their pages are
 * page cache that the kernel writes out and drops under memory pressure, not
 * this backend's private memory, and nothing of them outlives the backend.
 * Everything is unmapped, and the core's spilling turned off, when the
 * memory context they were made in goes away, on error too.
 */
#include "postgres.h"

#include "catalog/pg_tablespace_d.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "tsdg.h"

/*
 * The core's arrays from this size up go to files: its per-thread scratch
 * stays in memory, every array that grows with the row count is larger.
 */
#define TSDG_SPILL_MIN_BYTES ((size_t) 1 << 20)

struct TsdgSpill
{
	MemoryContextCallback callback;
	List	   *arrays;			/* mapped arrays not yet freed */
	bool		active;
};

static void
TsdgSpillRelease(void *arg)
{
	TsdgSpill  *spill = (TsdgSpill *) arg;
	ListCell   *lc;

	if (!spill->active)
		return;
	tsdg_set_spill_directory(NULL, 0);
	foreach(lc, spill->arrays)
		tsdg_spill_free(lfirst(lc));
	spill->arrays = NIL;
	spill->active = false;
}

TsdgSpill *
TsdgSpillStart(void)
{
	TsdgSpill  *spill = palloc0(sizeof(TsdgSpill));
	char		directory[MAXPGPATH];
	Oid			tablespace;

	/* where a sort or hash join of this session would spill */
	PrepareTempTablespaces();
	tablespace = GetNextTempTableSpace();
	if (!OidIsValid(tablespace))
		tablespace = OidIsValid(MyDatabaseTableSpace) ? MyDatabaseTableSpace : DEFAULTTABLESPACE_OID;
	TempTablespacePath(directory, tablespace);
	/* as fd.c does: the directory is made on first use */
	(void) MakePGDirectory(directory);

	spill->callback.func = TsdgSpillRelease;
	spill->callback.arg = spill;
	spill->active = true;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &spill->callback);
	tsdg_set_spill_directory(directory, TSDG_SPILL_MIN_BYTES);
	return spill;
}

void *
TsdgSpillAlloc(TsdgSpill *spill, Size bytes)
{
	TsdgError	error;
	void	   *memory;
	MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(spill));

	/* the list cell first, so that a mapped array is never lost to an error */
	spill->arrays = lappend(spill->arrays, NULL);
	MemoryContextSwitchTo(old);
	if (tsdg_spill_allocate(bytes, &memory, &error) != TSDG_OK)
	{
		spill->arrays = list_delete_last(spill->arrays);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not make a temporary file for a tsdg build: %s", error.message)));
	}
	llast(spill->arrays) = memory;
	return memory;
}

void
TsdgSpillFree(TsdgSpill *spill, void *memory)
{
	spill->arrays = list_delete_ptr(spill->arrays, memory);
	tsdg_spill_free(memory);
}

void
TsdgSpillEnd(TsdgSpill *spill)
{
	TsdgSpillRelease(spill);
}
