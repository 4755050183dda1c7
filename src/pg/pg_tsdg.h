/*
 * Declarations shared by the parts of the PostgreSQL glue.
 */
#ifndef PG_TSDG_H
#define PG_TSDG_H

void		_PG_init(void);

/* tsdg.c: reloptions and GUCs of the tsdg access method */
void		TsdgInit(void);

/* tsdgworker.c: GUCs and registration of the GPU worker (when preloaded) */
void		TsdgWorkerInit(void);

#endif							/* PG_TSDG_H */
