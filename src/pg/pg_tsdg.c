/*
 * pg_tsdg: module entry point. Each part of the extension registers its GUCs,
 * reloptions and background worker from here.
 */
#include "postgres.h"

#include "fmgr.h"

#include "pg_tsdg.h"

PG_MODULE_MAGIC;

void
_PG_init(void)
{
	/* before TsdgInit, which reserves the tsdg. prefix once all GUCs exist */
	TsdgWorkerInit();
	TsdgInit();
}
