/*
 * The GPU worker's registration and its supervisor.
 *
 * The background worker registered here does not touch the GPU itself: it
 * forks the GPU server (tsdggpuserver.c) and restarts it when it dies. The
 * reason is PostgreSQL's crash handling: when a child of the postmaster that
 * is attached to shared memory dies of a signal, the postmaster restarts the
 * whole cluster and every session is disconnected. A GPU driver fault or a
 * kill -9 of the process holding the CUDA context must cost the sessions no
 * more than a CPU search, so that process is a child of this worker, which
 * sees its death, fails the requests it held (the sessions search on the
 * CPU at once) and starts a new one after a second. The server dies with
 * this worker (PR_SET_PDEATHSIG), and this worker with the postmaster.
 */
#include "postgres.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/fork_process.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "tsdg.h"
#include "tsdgipc.h"
#include "tsdgworkerclient.h"
#include "tsdgworkerserver.h"

#define TSDG_SERVER_RESTART_DELAY_MS	1000
#define TSDG_SERVER_STOP_WAIT_MS		10000

int			tsdg_batch_wait_us = 100;
int			tsdg_worker_timeout_ms = 2000;
int			tsdg_gpu_memory_limit_mb = 0;
int			tsdg_worker_backend = TSDG_WORKER_BACKEND_CUDA;
int			tsdg_gpu_device_number = 0;
int			tsdg_batch_memory_mb = 32;
int			tsdg_worker_pending_rows = 1000;
int			tsdg_worker_max_ef_search = 2048;
int			tsdg_worker_max_k = 1000;

static const struct config_enum_entry tsdg_worker_backend_options[] = {
	{"cuda", TSDG_WORKER_BACKEND_CUDA, false},
	{"cpu", TSDG_WORKER_BACKEND_CPU, false},
	{NULL, 0, false}
};

static volatile sig_atomic_t server_exited = false;
static pid_t server_pid = 0;

static void
TsdgDefineWorkerGucs(void)
{
	DefineCustomIntVariable("tsdg.batch_wait_us",
							"Sets how long the GPU worker waits for more queries before it searches a batch.",
							"It waits only while fewer queries are queued than sessions sent queries lately.",
							&tsdg_batch_wait_us, 100, 0, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.worker_timeout_ms",
							"Sets how long a session waits for the GPU worker before it searches on the CPU.",
							NULL,
							&tsdg_worker_timeout_ms, 2000, 1, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.worker_pending_rows",
							"Sets how many pending rows an index must have for the GPU worker to keep a copy of them and search them with the graph.",
							"Fewer are scanned by the session itself, which costs less than sending them; -1: always by the session.",
							&tsdg_worker_pending_rows, 1000, -1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.gpu_memory_limit",
							"Sets the most GPU memory the resident indexes of the GPU worker and their copies of pending rows may take.",
							"Least recently used indexes are dropped for a new one to stay under it, and pending rows past it are left to the sessions' own scans; 0 leaves only the device's own limit.",
							&tsdg_gpu_memory_limit_mb, 0, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);

	/*
	 * The worker serves every session: a search wider than these holds it
	 * for one user, so it runs in that user's session instead. Only a
	 * superuser may change them, or the user they would bound could.
	 */
	DefineCustomIntVariable("tsdg.worker_max_ef_search",
							"Sets the widest search (ef, or k where larger) the GPU worker takes from a session.",
							"Wider searches run on the CPU in the session.",
							&tsdg_worker_max_ef_search, 2048, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.worker_max_k",
							"Sets the most results per query of a batch search the GPU worker takes from a session.",
							"Batches asking for more run on the CPU in the session.",
							&tsdg_worker_max_k, 1000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
}

/*
 * Settings read once, by the postmaster, to size shared memory and start the
 * worker. PostgreSQL ends a session that defines a PGC_POSTMASTER setting
 * after startup, so a session that loads pg_tsdg on its own (no preload, no
 * worker to configure) defines them as reloadable instead: postgresql.conf
 * may still set them, for a later restart with the preload, without a
 * warning in every session.
 */
static void
TsdgDefinePostmasterGucs(GucContext context)
{
	DefineCustomIntVariable("tsdg.batch_memory",
							"Sets the shared memory kept for the batches of tsdg_search_batch.",
							"One session's batch at a time uses it instead of creating a shared memory segment; 0 turns it off.",
							&tsdg_batch_memory_mb, 32, 0, INT_MAX / 2,
							context, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomEnumVariable("tsdg.worker_backend",
							 "Sets the backend the GPU worker runs: cuda, or cpu to run the worker path without a GPU.",
							 NULL,
							 &tsdg_worker_backend, TSDG_WORKER_BACKEND_CUDA, tsdg_worker_backend_options,
							 context, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tsdg.gpu_device",
							"Sets the number of the GPU the worker uses.",
							NULL,
							&tsdg_gpu_device_number, 0, 0, 64,
							context, 0, NULL, NULL, NULL);
}

static void
TsdgRegisterWorker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "pg_tsdg");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "TsdgWorkerSupervisorMain");
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsdg GPU supervisor");
	snprintf(worker.bgw_type, BGW_MAXLEN, "pg_tsdg GPU supervisor");
	RegisterBackgroundWorker(&worker);
}

/* Called from _PG_init. The worker exists only when pg_tsdg is preloaded. */
void
TsdgWorkerInit(void)
{
	TsdgDefineWorkerGucs();
	if (!process_shared_preload_libraries_in_progress)
	{
		TsdgDefinePostmasterGucs(PGC_SIGHUP);
		return;
	}
	TsdgDefinePostmasterGucs(PGC_POSTMASTER);
	TsdgIpcRequestShmem();
	TsdgRegisterWorker();
}

static void
TsdgSupervisorSigchld(SIGNAL_ARGS)
{
	int			save_errno = errno;

	server_exited = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
TsdgPublishSettings(void)
{
	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->batch_wait_us = tsdg_batch_wait_us;
	TsdgShared->memory_limit_bytes = (int64) tsdg_gpu_memory_limit_mb * 1024 * 1024;
	SpinLockRelease(&TsdgShared->mutex);
}

static void
TsdgStartServer(void)
{
	pid_t		pid;

	TsdgIpcSetServerState(TSDG_SERVER_STARTING, "", NULL);
	pid = fork_process();
	if (pid == 0)
		TsdgGpuServerMain();
	if (pid < 0)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU supervisor could not fork the GPU worker: %m")));
		TsdgIpcSetServerState(TSDG_SERVER_STOPPED, NULL, "fork failed");
		return;
	}
	server_pid = pid;
	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->server_starts++;
	SpinLockRelease(&TsdgShared->mutex);
}

/*
 * Reaps the GPU server. Returns true when it should be started again: it did
 * not exit on its own after finding no GPU.
 */
static bool
TsdgReapServer(void)
{
	int			status;
	pid_t		pid;
	bool		restart = false;

	server_exited = false;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		char		why[64];
		TsdgServerState state;

		if (pid != server_pid)
			continue;
		server_pid = 0;
		state = TsdgIpcServerState();
		SpinLockAcquire(&TsdgShared->mutex);
		TsdgShared->server_pid = 0;
		TsdgShared->resident_count = 0;
		TsdgShared->memory_used = 0;
		TsdgShared->device_free = 0;
		TsdgShared->device_total = 0;
		SpinLockRelease(&TsdgShared->mutex);

		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		{
			/* it found no GPU, or it was stopped: stay idle */
			if (state != TSDG_SERVER_NO_DEVICE)
				TsdgIpcSetServerState(TSDG_SERVER_STOPPED, NULL, NULL);
			TsdgIpcFailAll("the GPU worker stopped");
			continue;
		}
		if (WIFSIGNALED(status))
			snprintf(why, sizeof(why), "was terminated by signal %d", WTERMSIG(status));
		else
			snprintf(why, sizeof(why), "exited with exit code %d", WEXITSTATUS(status));
		TsdgIpcSetServerState(TSDG_SERVER_STOPPED, NULL, why);
		TsdgIpcFailAll("the GPU worker died");
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker (PID %d) %s; sessions search on the CPU until it is restarted",
						(int) pid, why)));
		restart = true;
	}
	return restart;
}

static void
TsdgStopServer(void)
{
	TimestampTz deadline;

	if (server_pid == 0)
		return;
	kill(server_pid, SIGTERM);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), TSDG_SERVER_STOP_WAIT_MS);
	while (server_pid != 0 && GetCurrentTimestamp() < deadline)
	{
		int			status;

		if (waitpid(server_pid, &status, WNOHANG) == server_pid)
			server_pid = 0;
		else
			pg_usleep(10000);
	}
	if (server_pid != 0)
		kill(server_pid, SIGKILL);
	server_pid = 0;
}

void
TsdgWorkerSupervisorMain(Datum main_arg)
{
	TimestampTz restart_at = 0;
	bool		want_server = true;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGCHLD, TsdgSupervisorSigchld);
	BackgroundWorkerUnblockSignals();

	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->supervisor_pid = MyProcPid;
	SpinLockRelease(&TsdgShared->mutex);
	TsdgPublishSettings();
	/* requests of a server that died with a previous supervisor */
	TsdgIpcFailAll("the GPU worker restarted");

	if (tsdg_device == TSDG_DEVICE_CPU)
	{
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker not started: tsdg.device = cpu")));
		TsdgIpcSetServerState(TSDG_SERVER_DISABLED, "", "tsdg.device = cpu");
		want_server = false;
	}

	while (!ShutdownRequestPending)
	{
		long		timeout_ms = 1000;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			TsdgPublishSettings();
		}
		if (server_exited && TsdgReapServer())
			restart_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 TSDG_SERVER_RESTART_DELAY_MS);
		if (want_server && server_pid == 0 &&
			TsdgIpcServerState() != TSDG_SERVER_NO_DEVICE &&
			(restart_at == 0 || GetCurrentTimestamp() >= restart_at))
		{
			TsdgStartServer();
			restart_at = 0;
		}
		if (restart_at != 0)
			timeout_ms = TSDG_SERVER_RESTART_DELAY_MS;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}

	TsdgStopServer();
	TsdgIpcFailAll("the GPU worker is shutting down");
	proc_exit(0);
}
