/*
 * Free and total memory of the worker's GPU for tsdg_gpu_status(), read by
 * the GPU server process through NVML (libnvidia-ml.so.1, which comes with
 * the driver) loaded at run time: it asks the driver without a CUDA context,
 * so the numbers include every process on the device. Where NVML is missing
 * they stay unknown (-1). The device number is NVML's, which matches CUDA's
 * unless CUDA_VISIBLE_DEVICES reorders the devices.
 */
#include "postgres.h"

#include <dlfcn.h>

#include "tsdgipc.h"
#include "tsdgworkerserver.h"

/* the parts of nvml.h this file uses */
typedef struct TsdgNvmlMemory
{
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} TsdgNvmlMemory;

typedef int (*TsdgNvmlInitFn) (void);
typedef int (*TsdgNvmlDeviceByIndexFn) (unsigned int index, void **device);
typedef int (*TsdgNvmlMemoryInfoFn) (void *device, TsdgNvmlMemory *memory);

static TsdgNvmlMemoryInfoFn memory_info = NULL;
static void *nvml_device = NULL;

/* Opens NVML once; false when it is not there. */
static bool
TsdgNvmlOpen(void)
{
	static bool tried = false;
	void	   *lib;
	TsdgNvmlInitFn init;
	TsdgNvmlDeviceByIndexFn by_index;

	if (tried)
		return memory_info != NULL;
	tried = true;
	lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		return false;
	init = (TsdgNvmlInitFn) dlsym(lib, "nvmlInit_v2");
	by_index = (TsdgNvmlDeviceByIndexFn) dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	memory_info = (TsdgNvmlMemoryInfoFn) dlsym(lib, "nvmlDeviceGetMemoryInfo");
	if (init == NULL || by_index == NULL || memory_info == NULL ||
		init() != 0 || by_index((unsigned int) tsdg_gpu_device_number, &nvml_device) != 0)
	{
		memory_info = NULL;
		return false;
	}
	return true;
}

/* Publishes the device's free and total memory in shared memory. */
void
TsdgPublishDeviceMemory(void)
{
	TsdgNvmlMemory memory;
	int64		free_bytes = -1;
	int64		total_bytes = -1;

	if (TsdgNvmlOpen() && memory_info(nvml_device, &memory) == 0)
	{
		free_bytes = (int64) memory.free;
		total_bytes = (int64) memory.total;
	}
	SpinLockAcquire(&TsdgShared->mutex);
	TsdgShared->device_free = free_bytes;
	TsdgShared->device_total = total_bytes;
	SpinLockRelease(&TsdgShared->mutex);
}
