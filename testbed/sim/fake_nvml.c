/*
 * Kiln testbed: a fake libnvidia-ml.so.1 so that the REAL pynvml code path of the probe runs on
 * machines without GPUs.
 *
 *   gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 *
 * Node state comes from the key=value file named by $KILN_SIM_STATE, re-read at every nvmlInit
 * (see testbed/sim/__init__.py for the keys; absent keys mean a healthy 8x H100 node). The same
 * model (UUIDs, serials, bus ids, temperatures) is implemented in testbed/sim/nvidia-smi: keep the
 * two in step, the probe's NVML and nvidia-smi paths must read the same facts.
 *
 * Struct layouts and symbol names follow pynvml (nvidia-ml-py 13): e.g. nvmlInit() calls
 * nvmlInitWithFlags, nvmlDeviceGetCount() calls nvmlDeviceGetCount_v2, nvmlDeviceGetPciInfo()
 * calls nvmlDeviceGetPciInfo_v3. Reads the fake node cannot answer return NOT_SUPPORTED.
 *
 * Load: while the simulated gpu_burn runs it keeps a marker file "$KILN_SIM_STATE.load" holding
 * its pid. Every temperature/power/clock/clock-reason query looks at it (a marker whose pid is dead
 * is stale and ignored): under load temperatures ramp over LOAD_RAMP_S to ~65-72 C (HBM ~73-80 C),
 * power to ~650-685 W, SM clock to 1980 MHz, and the "GPU idle" clock reason clears. Faults under
 * load: hot_gpu (+hot_delta C, default 12) and throttle_gpu (sw+hw thermal slowdown, the
 * temperature at the slowdown threshold, a reduced clock and power). Loaded power never exceeds
 * the enforced limit (power_cap_gpu). testbed/sim/power.py mirrors the power model for the node's
 * BMC and the facility's PDUs: keep the two in step.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

#define MAX_GPUS 64
#define MAX_TEXT 96

/* ------------------------------------------------------------------------------------ state */

typedef struct {
    int gpus;
    char model[MAX_TEXT];
    char driver[MAX_TEXT];
    int cuda;
    char vbios[MAX_TEXT];
    char serial_prefix[MAX_TEXT];
    char node[MAX_TEXT];
    /* Fault sets: bit N set = physical GPU slot N has the fault. */
    uint64_t missing, ecc_unc, ecc_corr, remap_pending, remap_failure, ecc_disabled, temp_gpus, pcie_degraded;
    uint64_t hot, throttle; /* under load only */
    uint64_t power_cap; /* enforced power limit lowered to power_cap_w */
    uint64_t swapped; /* another board in the slot: its own UUID and serial */
    int power_cap_w;
    int hot_delta;
    int ecc_uncorrectable_count;
    int ecc_corrected_count;
    int temp_value;
    int hang, garbage, nvml_absent;
    int delay_ms; /* a slow but healthy node: nvmlInit takes this long */
} sim_state_t;

typedef struct {
    int slot; /* physical position; the NVML index is its rank among present GPUs */
    char uuid[MAX_TEXT];
    char serial[MAX_TEXT];
    char bus_id[MAX_TEXT];
    unsigned int bus;
} sim_gpu_t;

static sim_state_t g_state;
static sim_gpu_t g_gpus[MAX_GPUS];
static int g_count = 0;
static int g_initialized = 0;

/* HGX H100 8-GPU baseboard bus numbers; further slots get synthetic ones. */
static const unsigned int k_bus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

static void copy_text(char *dst, const char *src) {
    snprintf(dst, MAX_TEXT, "%s", src);
}

static uint64_t parse_set(const char *value) {
    /* "3" or "1,5": a set of GPU slots. */
    uint64_t set = 0;
    const char *p = value;
    while (*p) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p) break;
        if (n >= 0 && n < MAX_GPUS) set |= (uint64_t)1 << n;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return set;
}

static void set_defaults(sim_state_t *s) {
    memset(s, 0, sizeof(*s));
    s->gpus = 8;
    copy_text(s->model, "NVIDIA H100 80GB HBM3");
    copy_text(s->driver, "550.54.15");
    s->cuda = 12040;
    copy_text(s->vbios, "96.00.89.00.01");
    copy_text(s->serial_prefix, "16549220");
    if (gethostname(s->node, MAX_TEXT - 1) != 0) copy_text(s->node, "localhost");
    s->ecc_uncorrectable_count = 2;
    s->ecc_corrected_count = 5;
    s->temp_value = 90;
    s->hot_delta = 12;
    s->power_cap_w = 500;
}

static char *trim(char *text) {
    char *end;
    while (*text == ' ' || *text == '\t') text++;
    end = text + strlen(text);
    while (end > text && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) *--end = 0;
    return text;
}

static void apply(sim_state_t *s, const char *key, const char *value) {
    if (!strcmp(key, "gpus")) s->gpus = atoi(value);
    else if (!strcmp(key, "model")) copy_text(s->model, value);
    else if (!strcmp(key, "driver")) copy_text(s->driver, value);
    else if (!strcmp(key, "cuda")) s->cuda = atoi(value);
    else if (!strcmp(key, "vbios")) copy_text(s->vbios, value);
    else if (!strcmp(key, "serial_prefix")) copy_text(s->serial_prefix, value);
    else if (!strcmp(key, "node") || !strcmp(key, "uuid_seed")) copy_text(s->node, value);
    else if (!strcmp(key, "missing_gpu")) s->missing = parse_set(value);
    else if (!strcmp(key, "ecc_uncorrectable_gpu")) s->ecc_unc = parse_set(value);
    else if (!strcmp(key, "ecc_uncorrectable_count")) s->ecc_uncorrectable_count = atoi(value);
    else if (!strcmp(key, "ecc_corrected_gpu")) s->ecc_corr = parse_set(value);
    else if (!strcmp(key, "ecc_corrected_count")) s->ecc_corrected_count = atoi(value);
    else if (!strcmp(key, "remap_pending_gpu")) s->remap_pending = parse_set(value);
    else if (!strcmp(key, "remap_failure_gpu")) s->remap_failure = parse_set(value);
    else if (!strcmp(key, "ecc_disabled_gpu")) s->ecc_disabled = parse_set(value);
    else if (!strcmp(key, "temp_gpu")) s->temp_gpus = parse_set(value);
    else if (!strcmp(key, "temp_value")) s->temp_value = atoi(value);
    else if (!strcmp(key, "pcie_degraded_gpu")) s->pcie_degraded = parse_set(value);
    else if (!strcmp(key, "power_cap_gpu")) s->power_cap = parse_set(value);
    else if (!strcmp(key, "swap_gpu")) s->swapped = parse_set(value);
    else if (!strcmp(key, "power_cap_w")) s->power_cap_w = atoi(value);
    else if (!strcmp(key, "hot_gpu")) s->hot = parse_set(value);
    else if (!strcmp(key, "hot_delta")) s->hot_delta = atoi(value);
    else if (!strcmp(key, "throttle_gpu")) s->throttle = parse_set(value);
    else if (!strcmp(key, "hang")) s->hang = atoi(value);
    else if (!strcmp(key, "delay_ms")) s->delay_ms = atoi(value);
    else if (!strcmp(key, "garbage")) s->garbage = atoi(value);
    else if (!strcmp(key, "nvml_absent")) s->nvml_absent = atoi(value);
    /* unknown keys are ignored: the Python writer validates them */
}

static void load_state(sim_state_t *s) {
    char line[512];
    const char *path = getenv("KILN_SIM_STATE");
    FILE *f;
    set_defaults(s);
    if (!path || !*path) return;
    f = fopen(path, "r");
    if (!f) return; /* no file: a healthy node */
    while (fgets(line, sizeof(line), f)) {
        char *text = trim(line);
        char *eq;
        if (!*text || *text == '#') continue;
        eq = strchr(text, '=');
        if (!eq) continue;
        *eq = 0;
        apply(s, trim(text), trim(eq + 1));
    }
    fclose(f);
    if (s->gpus < 0) s->gpus = 0;
    if (s->gpus > MAX_GPUS) s->gpus = MAX_GPUS;
}

/* FNV-1a 64: the same function is used by the nvidia-smi simulator, so IDs match. */
static uint64_t fnv1a(const char *text) {
    uint64_t h = 1469598103934665603ULL;
    for (; *text; text++) {
        h ^= (unsigned char)*text;
        h *= 1099511628211ULL;
    }
    return h;
}

static void build_gpus(void) {
    int slot;
    g_count = 0;
    for (slot = 0; slot < g_state.gpus; slot++) {
        sim_gpu_t *g;
        char seed[256];
        uint64_t a, b;
        if (g_state.missing & ((uint64_t)1 << slot)) continue;
        g = &g_gpus[g_count++];
        g->slot = slot;
        unsigned int serial_part;
        snprintf(seed, sizeof(seed), "%s/%d/a", g_state.node, slot);
        a = fnv1a(seed);
        serial_part = (unsigned int)(a % 1000);
        if (g_state.swapped & ((uint64_t)1 << slot)) {
            /* The replacement board: its IDs from another seed, its serial never the one it replaced. */
            snprintf(seed, sizeof(seed), "%s/%d/swap/a", g_state.node, slot);
            a = fnv1a(seed);
            serial_part = (unsigned int)(a % 1000) == serial_part ? (serial_part + 1) % 1000 : (unsigned int)(a % 1000);
            snprintf(seed, sizeof(seed), "%s/%d/swap/b", g_state.node, slot);
        } else {
            snprintf(seed, sizeof(seed), "%s/%d/b", g_state.node, slot);
        }
        b = fnv1a(seed);
        snprintf(g->uuid, MAX_TEXT, "GPU-%08x-%04x-%04x-%04x-%012llx", (unsigned int)(a >> 32),
                 (unsigned int)((a >> 16) & 0xffff), (unsigned int)(a & 0xffff), (unsigned int)(b >> 48),
                 (unsigned long long)(b & 0xffffffffffffULL));
        snprintf(g->serial, MAX_TEXT, "%.80s%03u%02d", g_state.serial_prefix, serial_part, slot);
        g->bus = slot < 8 ? k_bus[slot] : (unsigned int)(0xe0 + slot - 8);
        snprintf(g->bus_id, MAX_TEXT, "00000000:%02X:00.0", g->bus);
    }
}

static int has(uint64_t set, const sim_gpu_t *g) {
    return (set & ((uint64_t)1 << g->slot)) != 0;
}

/* ------------------------------------------------------------------------------------ load */

#define LOAD_RAMP_S 1.5       /* seconds from idle to steady load: short, tests burn for 2-5 s */
#define SLOWDOWN_TEMP 87      /* nvmlDeviceGetTemperatureThreshold(SLOWDOWN) below */
#define MAX_OPERATING_TEMP 85 /* nvmlDeviceGetTemperatureThreshold(GPU_MAX) below */

/* 0 when idle, rising linearly to 1 over LOAD_RAMP_S after the marker appeared. Read on every
 * query (the probe's sampler keeps NVML initialised for the whole run). */
static double load_level(void) {
    char path[4096];
    char text[64];
    const char *state = getenv("KILN_SIM_STATE");
    struct stat st;
    struct timespec now;
    FILE *f;
    long pid;
    double age;
    if (!state || !*state) return 0.0;
    snprintf(path, sizeof(path), "%s.load", state);
    f = fopen(path, "r");
    if (!f) return 0.0;
    if (fstat(fileno(f), &st) != 0 || !fgets(text, sizeof(text), f)) {
        fclose(f);
        return 0.0;
    }
    fclose(f);
    pid = strtol(text, NULL, 10);
    /* A marker left by a killed gpu_burn must not keep the node "hot" forever. */
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) return 0.0;
    clock_gettime(CLOCK_REALTIME, &now);
    age = (double)(now.tv_sec - st.st_mtim.tv_sec) + (double)(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
    if (age <= 0.0) return 0.05; /* just started: already drawing some load */
    return age >= LOAD_RAMP_S ? 1.0 : 0.05 + 0.95 * age / LOAD_RAMP_S;
}

static int lerp(double from, double to, double level) {
    return (int)(from + (to - from) * level + 0.5);
}

static int gpu_temp_at(const sim_gpu_t *g, double load) {
    double idle = 33 + g->slot % 8; /* 33..40 C, idle */
    double busy = 65 + g->slot % 8; /* 65..72 C under gpu_burn with healthy cooling */
    if (has(g_state.temp_gpus, g)) return g_state.temp_value;
    if (has(g_state.throttle, g)) busy = SLOWDOWN_TEMP;
    else if (has(g_state.hot, g)) busy += g_state.hot_delta;
    return lerp(idle, busy, load);
}

static int gpu_temp(const sim_gpu_t *g) {
    return gpu_temp_at(g, load_level());
}

/* ------------------------------------------------------------------------------------ helpers */

#define CHECK_INIT() \
    do { \
        if (!g_initialized) return NVML_ERROR_UNINITIALIZED; \
    } while (0)

static sim_gpu_t *as_gpu(void *handle) {
    sim_gpu_t *g = (sim_gpu_t *)handle;
    if (g < g_gpus || g >= g_gpus + g_count) return NULL;
    return g;
}

#define GET_GPU(var, handle) \
    sim_gpu_t *var; \
    CHECK_INIT(); \
    var = as_gpu(handle); \
    if (!var) return NVML_ERROR_INVALID_ARGUMENT

static nvmlReturn_t put_text(char *dst, unsigned int size, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > size) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------ init */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    load_state(&g_state);
    if (g_state.hang) {
        /* A wedged driver: only the caller's timeout gets us out. */
        for (;;) sleep(60);
    }
    if (g_state.delay_ms > 0) usleep((useconds_t)g_state.delay_ms * 1000);
    if (g_state.nvml_absent) return NVML_ERROR_LIBRARY_NOT_FOUND;
    if (g_state.garbage) return NVML_ERROR_LIB_RM_VERSION_MISMATCH; /* "Driver/library version mismatch" */
    build_gpus();
    g_initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlInit(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
    CHECK_INIT();
    g_initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------------------------ system */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    CHECK_INIT();
    return put_text(version, length, g_state.driver);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    char text[MAX_TEXT];
    CHECK_INIT();
    snprintf(text, sizeof(text), "%d.%.80s", g_state.cuda / 1000, g_state.driver);
    return put_text(version, length, text);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    CHECK_INIT();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = g_state.cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

/* ------------------------------------------------------------------------------------ devices */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    CHECK_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)g_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    return nvmlDeviceGetCount_v2(count);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    CHECK_INIT();
    if (!device || index >= (unsigned int)g_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetIndex(void *device, unsigned int *index) {
    GET_GPU(g, device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)(g - g_gpus);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(void *device, unsigned int *minor) {
    GET_GPU(g, device);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned int)g->slot;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    GET_GPU(g, device);
    (void)g;
    return put_text(name, length, g_state.model);
}

nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    GET_GPU(g, device);
    return put_text(uuid, length, g->uuid);
}

nvmlReturn_t nvmlDeviceGetSerial(void *device, char *serial, unsigned int length) {
    GET_GPU(g, device);
    return put_text(serial, length, g->serial);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(void *device, char *version, unsigned int length) {
    GET_GPU(g, device);
    (void)g;
    return put_text(version, length, g_state.vbios);
}

/* Layout of pynvml's nvmlPciInfo_t (the v3 struct). */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *device, nvmlPciInfo_t *pci) {
    GET_GPU(g, device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", g->bus);
    pci->domain = 0;
    pci->bus = g->bus;
    pci->device = 0;
    pci->pciDeviceId = 0x233010DE;    /* H100 SXM5 80GB */
    pci->pciSubSystemId = 0x16C110DE;
    snprintf(pci->busId, sizeof(pci->busId), "%.31s", g->bus_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(void *device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

/* ------------------------------------------------------------------------------------ ECC */

nvmlReturn_t nvmlDeviceGetEccMode(void *device, unsigned int *current, unsigned int *pending) {
    GET_GPU(g, device);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = has(g_state.ecc_disabled, g) ? 0 : 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *device, unsigned int errorType, unsigned int counterType,
                                         unsigned long long *count) {
    GET_GPU(g, device);
    if (!count || errorType > 1 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    /* With ECC off the counters are not kept (nvidia-smi prints N/A). */
    if (has(g_state.ecc_disabled, g)) return NVML_ERROR_NOT_SUPPORTED;
    *count = 0;
    if (errorType == 1 && has(g_state.ecc_unc, g)) *count = (unsigned long long)g_state.ecc_uncorrectable_count;
    if (errorType == 0 && has(g_state.ecc_corr, g)) *count = (unsigned long long)g_state.ecc_corrected_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(void *device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    GET_GPU(g, device);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = 0;
    *uncRows = 0;
    *isPending = has(g_state.remap_pending, g) ? 1 : 0;
    *failureOccurred = has(g_state.remap_failure, g) ? 1 : 0;
    return NVML_SUCCESS;
}

/* Page retirement is pre-Ampere; Hopper answers NOT_SUPPORTED like the real driver. */
nvmlReturn_t nvmlDeviceGetRetiredPages(void *device, unsigned int cause, unsigned int *count,
                                       unsigned long long *addresses) {
    GET_GPU(g, device);
    (void)g; (void)cause; (void)count; (void)addresses;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(void *device, unsigned int cause, unsigned int *count,
                                          unsigned long long *addresses, unsigned long long *timestamps) {
    GET_GPU(g, device);
    (void)g; (void)cause; (void)count; (void)addresses; (void)timestamps;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *device, unsigned int *isPending) {
    GET_GPU(g, device);
    (void)g; (void)isPending;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------------------ thermal */

nvmlReturn_t nvmlDeviceGetTemperature(void *device, unsigned int sensor, unsigned int *temp) {
    GET_GPU(g, device);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned int)gpu_temp(g);
    return NVML_SUCCESS;
}

/* pynvml's c_nvmlTemperature_v1_t */
typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

nvmlReturn_t nvmlDeviceGetTemperatureV(void *device, nvmlTemperature_v1_t *info) {
    GET_GPU(g, device);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != 0x100000C) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (info->sensorType != 0) return NVML_ERROR_NOT_SUPPORTED;
    info->temperature = gpu_temp(g);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(void *device, unsigned int threshold, unsigned int *temp) {
    GET_GPU(g, device);
    (void)g;
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    switch (threshold) { /* H100 SXM datasheet-like values */
    case 0: *temp = 92; return NVML_SUCCESS; /* shutdown */
    case 1: *temp = 87; return NVML_SUCCESS; /* slowdown */
    case 2: *temp = 95; return NVML_SUCCESS; /* memory max operating */
    case 3: *temp = 85; return NVML_SUCCESS; /* GPU max operating */
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* pynvml's c_nvmlFieldValue_t */
typedef struct {
    uint32_t fieldId;
    uint32_t scopeId;
    int64_t timestamp;
    int64_t latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    union {
        double dVal;
        unsigned int uiVal;
        unsigned long ulVal;
        unsigned long long ullVal;
        long long sllVal;
        int siVal;
        unsigned short usVal;
    } value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_MEMORY_TEMP 82

nvmlReturn_t nvmlDeviceGetFieldValues(void *device, int valuesCount, nvmlFieldValue_t *values) {
    int i;
    GET_GPU(g, device);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = 0;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        if (v->fieldId == NVML_FI_DEV_MEMORY_TEMP) {
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            double load = load_level();
            /* HBM runs a little warmer: +5 C idle, +8 C under load (73..80 C) */
            v->value.uiVal = (unsigned int)(gpu_temp_at(g, load) + lerp(5, 8, load));
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------ power, clocks */

nvmlReturn_t nvmlDeviceGetPowerUsage(void *device, unsigned int *milliwatts) {
    GET_GPU(g, device);
    if (!milliwatts) return NVML_ERROR_INVALID_ARGUMENT;
    {
        double load = load_level();
        double idle_mw = 70000.0 + g->slot * 137.0;                            /* idle ~70 W */
        double busy_mw = has(g_state.throttle, g) ? 480000.0 : 650000.0 + g->slot * 5000.0; /* 650-685 W */
        /* a GPU never draws more than its enforced limit (a power_cap_gpu runs at its cap) */
        double limit_mw = has(g_state.power_cap, g) ? g_state.power_cap_w * 1000.0 : 700000.0;
        if (busy_mw > limit_mw) busy_mw = limit_mw;
        *milliwatts = (unsigned int)lerp(idle_mw, busy_mw, load);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *milliwatts) {
    GET_GPU(g, device);
    if (!milliwatts) return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = has(g_state.power_cap, g) ? (unsigned int)g_state.power_cap_w * 1000u : 700000u; /* H100 SXM: 700 W */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *device, unsigned int *milliwatts) {
    return nvmlDeviceGetEnforcedPowerLimit(device, milliwatts);
}

static unsigned long long clock_reasons(const sim_gpu_t *g) {
    double load = load_level();
    int t = gpu_temp_at(g, load);
    unsigned long long mask = 0;
    if (t >= MAX_OPERATING_TEMP) mask |= 0x20ULL; /* sw thermal slowdown past max operating */
    if (t >= SLOWDOWN_TEMP) mask |= 0x40ULL;      /* hw thermal slowdown past the slowdown threshold */
    if (load > 0.0 && has(g_state.throttle, g) && load >= 0.5) mask |= 0x60ULL;
    if (mask) return mask;
    return load > 0.0 ? 0x0ULL : 0x1ULL; /* busy: no reason at all; otherwise GPU idle */
}

/* nvmlClockType_t: 0 graphics, 1 SM, 2 memory, 3 video. H100 SXM: 1980 MHz max SM boost. */
static int sm_clock(const sim_gpu_t *g) {
    double load = load_level();
    int busy = (has(g_state.throttle, g) && load >= 0.5) ? 1410 : 1980;
    return load > 0.0 ? busy : 345; /* idle P0 clock */
}

nvmlReturn_t nvmlDeviceGetClockInfo(void *device, unsigned int type, unsigned int *clock) {
    GET_GPU(g, device);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case 0:
    case 1: *clock = (unsigned int)sm_clock(g); return NVML_SUCCESS;
    case 2: *clock = 2619; return NVML_SUCCESS; /* HBM3 */
    case 3: *clock = 1545; return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *device, unsigned int type, unsigned int *clock) {
    GET_GPU(g, device);
    (void)g;
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case 0:
    case 1: *clock = 1980; return NVML_SUCCESS;
    case 2: *clock = 2619; return NVML_SUCCESS;
    case 3: *clock = 1545; return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *reasons) {
    GET_GPU(g, device);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = clock_reasons(g);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *device, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(void *device, unsigned long long *reasons) {
    GET_GPU(g, device);
    (void)g;
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = 0x1FFULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(void *device, unsigned long long *reasons) {
    return nvmlDeviceGetSupportedClocksEventReasons(device, reasons);
}

/* ------------------------------------------------------------------------------------ PCIe */

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void *device, unsigned int *gen) {
    GET_GPU(g, device);
    if (!gen) return NVML_ERROR_INVALID_ARGUMENT;
    *gen = has(g_state.pcie_degraded, g) ? 4 : 5;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(void *device, unsigned int *gen) {
    GET_GPU(g, device);
    (void)g;
    if (!gen) return NVML_ERROR_INVALID_ARGUMENT;
    *gen = 5;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(void *device, unsigned int *gen) {
    return nvmlDeviceGetMaxPcieLinkGeneration(device, gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(void *device, unsigned int *width) {
    GET_GPU(g, device);
    if (!width) return NVML_ERROR_INVALID_ARGUMENT;
    *width = has(g_state.pcie_degraded, g) ? 8 : 16;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(void *device, unsigned int *width) {
    GET_GPU(g, device);
    (void)g;
    if (!width) return NVML_ERROR_INVALID_ARGUMENT;
    *width = 16;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------ MIG, margin */

nvmlReturn_t nvmlDeviceGetMigMode(void *device, unsigned int *current, unsigned int *pending) {
    GET_GPU(g, device);
    (void)g;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMarginTemperature(void *device, void *info) {
    GET_GPU(g, device);
    (void)g; (void)info;
    return NVML_ERROR_NOT_SUPPORTED;
}
