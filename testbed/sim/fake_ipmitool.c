/*
 * Kiln testbed: a simulated `ipmitool` for fake direct-liquid-cooled GPU nodes, compiled (a node's
 * BMC is read once per sample of every soak and burn-in: a Python process per reading cost ~50 ms
 * of CPU, enough to starve a small machine running eight simulated nodes).
 *
 *   gcc -O2 -o ipmitool fake_ipmitool.c -lm      (build_simulator does this into bin/ipmitool)
 *
 * `ipmitool sdr` (also `sdr list` and `sdr type temperature`) answers in the real compact format
 * ("Name | Reading units | status", names padded to 16 and readings to 17 columns, as in
 * tests/fixtures/ipmitool/); `sdr elist` in the real extended one ("Name | 52h | ok  | 10.1 | reading",
 * ipmitool lib/ipmi_sdr.c). The BMC sensors are those of a DLC node: ambient/exhaust air, coolant
 * inlet and outlet, a discrete leak detector, the node's input power ("Avg Power") and each of its
 * six PSUs' input power ("PSU1 Power In" .. "PSU6 Power In", the node's power split evenly; an HGX
 * H100 node has six PSUs, NVIDIA DGX H100 User Guide). Healthy by default (inlet 30 C, outlet 38 C).
 *
 * `ipmitool dcmi power reading` prints ipmitool's ipmi_dcmi_pwr_rd() format (lib/ipmi_dcmi.c, the
 * classic ctime() timestamp of ipmitool 1.8.18 as in tests/fixtures/ipmitool-dcmi/): the node's
 * instantaneous power (its GPUs as the fake NVML reports them, plus the platform overhead, plus the
 * power_over_pct fault), and the minimum, maximum and average of the readings taken in the last
 * dcmi_period_s seconds, kept in "$KILN_SIM_STATE.dcmi" (one "EPOCH WATTS" line per reading).
 *
 * The power model is testbed/sim/power.py's, which the Python readers (nvidia-smi, the facility's
 * Redfish service) import: keep the constants and the arithmetic here in step with it (and with
 * fake_nvml.c); tests/testbed/test_power_sim.py holds this tool to power.py's numbers.
 *
 * State keys (see testbed/sim/__init__.py): coolant_inlet=C, coolant_outlet=C, leak=1 (the leak
 * detector reads 0x01, status cr); power_over_pct=P; dcmi_period_s=S; dcmi_absent=1 (the BMC rejects
 * the DCMI command: "DCMI request failed because: Invalid command (c1)" on stderr, exit 1);
 * dcmi_deactivated=1 (a BMC without statistics: min = max = avg = now, timestamp at the epoch, period
 * 0, state deactivated); dcmi_hang=1 (the BMC never answers: only the caller's timeout ends it);
 * dcmi_garbage=1 (a truncated reading followed by junk). The GPU-driver faults (hang, garbage,
 * delay_ms, flood_mb) leave the BMC alone.
 *
 * `ipmitool fru` (`fru print`) lists the builtin FRU device and the six PSUs in ipmitool's format
 * (lib/ipmi_fru.c, as in tests/fixtures/ipmitool-fru/): each PSU's Product Serial is
 * seeded by the node's name; swap_psu=N (or "2,5") makes PSU N another unit, with its own serial.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* power.py: LOAD_RAMP_S, GPU_*_MW, GPU_LIMIT_W, DEFAULT_CAP_W, PLATFORM_*_W, DEFAULT_GPUS, MAX_GPUS,
 * DCMI_PERIOD_S, HISTORY_MAX (their sources are given there). */
#define LOAD_RAMP_S 1.5
#define GPU_IDLE_MW 70000.0
#define GPU_IDLE_STEP_MW 137.0
#define GPU_BUSY_MW 650000.0
#define GPU_BUSY_STEP_MW 5000.0
#define GPU_THROTTLED_MW 480000.0
#define GPU_LIMIT_W 700.0
#define DEFAULT_CAP_W 500.0
#define PLATFORM_IDLE_W 900.0
#define PLATFORM_LOAD_W 1500.0
#define DEFAULT_GPUS 8
#define MAX_GPUS 64
#define DCMI_PERIOD_S 60
#define HISTORY_MAX 4096
/* NVIDIA DGX H100 User Guide: six power supplies. */
#define PSUS 6
#define MAX_KEYS 256

static const char *PROG = "ipmitool (simulated)";

/* ------------------------------------------------------------------------------------ state */

typedef struct {
    char *key;
    char *value;
} entry_t;

static entry_t g_state[MAX_KEYS];
static int g_nstate;

static char *strip(char *s) {
    char *end;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f') s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\v' || end[-1] == '\f'))
        end--;
    *end = '\0';
    return s;
}

/* power.py read_state: key=value lines, `#` comments, the last of a key wins; a missing or
 * unreadable file is a healthy node. */
static void read_state(const char *path) {
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    if (!path || !*path || !(f = fopen(path, "r"))) return;
    while (getline(&line, &cap, f) >= 0) {
        char *s, *eq, *key, *value;
        int i;
        line[strcspn(line, "\n")] = '\0';
        s = strip(line);
        if (!*s || *s == '#' || !(eq = strchr(s, '='))) continue;
        *eq = '\0';
        key = strip(s);
        value = strip(eq + 1);
        for (i = 0; i < g_nstate && strcmp(g_state[i].key, key); i++) {
        }
        if (i == g_nstate) {
            if (g_nstate == MAX_KEYS) continue;
            g_state[g_nstate++].key = strdup(key);
        } else {
            free(g_state[i].value);
        }
        g_state[i].value = strdup(value);
    }
    free(line);
    fclose(f);
}

static const char *get(const char *key, const char *fallback) {
    int i;
    for (i = 0; i < g_nstate; i++)
        if (!strcmp(g_state[i].key, key)) return g_state[i].value;
    return fallback;
}

static int is(const char *key, const char *value) {
    const char *v = get(key, NULL);
    return v && !strcmp(v, value);
}

/* Python float() of a whole string (no hex, which float() refuses); 0 when it is not a number. */
static int parse_float(const char *text, double *out) {
    char *end;
    if (!text || !*text || strpbrk(text, "xX")) return 0;
    errno = 0;
    *out = strtod(text, &end);
    return end != text && *end == '\0';
}

/* power.py _number: the key's number, or the default when absent or not a number. */
static double number(const char *key, double fallback) {
    double v;
    return parse_float(get(key, NULL), &v) ? v : fallback;
}

/* power.py slots: "3" or "1,5" (spaces ignored); slots past MAX_GPUS cannot be present anyway. */
static void slot_set(const char *key, int set[MAX_GPUS]) {
    const char *p = get(key, "");
    memset(set, 0, sizeof(int) * MAX_GPUS);
    while (*p) {
        char part[32];
        size_t n = 0;
        int digits = 1;
        for (; *p && *p != ','; p++) {
            if (*p == ' ') continue;
            if (*p < '0' || *p > '9') digits = 0;
            if (n < sizeof(part) - 1) part[n++] = *p;
        }
        part[n] = '\0';
        if (*p == ',') p++;
        if (n && digits && n < 4) {
            int slot = atoi(part);
            if (slot < MAX_GPUS) set[slot] = 1;
        }
    }
}

/* ------------------------------------------------------------------------------------ power */

/* power.py load_level: 0 idle; 0.05 .. 1 over LOAD_RAMP_S after gpu_burn's marker appeared (its
 * pid alive; only ESRCH means gone). */
static double load_level(const char *state_path, double now) {
    char marker[4096];
    char text[64] = "";
    FILE *f;
    struct stat st;
    char *end, *s;
    long pid;
    double age;
    if (!state_path || !*state_path) return 0.0;
    if (snprintf(marker, sizeof marker, "%s.load", state_path) >= (int)sizeof marker) return 0.0;
    if (!(f = fopen(marker, "r"))) return 0.0;
    if (!fgets(text, sizeof text, f)) text[0] = '\0';
    fclose(f);
    if (stat(marker, &st) != 0) return 0.0;
    s = strip(text);
    s[strcspn(s, "\n")] = '\0';
    s = strip(s);
    errno = 0;
    pid = strtol(s, &end, 10);
    if (end == s || *end || errno) return 0.0;
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) return 0.0;
    age = now - ((double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9);
    if (age <= 0.0) return 0.05;
    return age >= LOAD_RAMP_S ? 1.0 : 0.05 + 0.95 * age / LOAD_RAMP_S;
}

/* power.py node_power(...).total_w: the GPUs as NVML reports them + the platform + power_over_pct. */
static double node_power_w(const char *state_path, double now) {
    int missing[MAX_GPUS], throttled[MAX_GPUS], capped[MAX_GPUS];
    double load = load_level(state_path, now);
    double gpus_f = number("gpus", DEFAULT_GPUS);
    double cap_mw = number("power_cap_w", DEFAULT_CAP_W) * 1000.0;
    double over_pct = number("power_over_pct", 0.0);
    double platform, gpu_w;
    long long sum_mw = 0;
    int count, slot;
    if (!isfinite(gpus_f)) gpus_f = DEFAULT_GPUS; /* Python's int() refuses it; a node needs a count */
    count = gpus_f < 0 ? 0 : gpus_f > MAX_GPUS ? MAX_GPUS : (int)gpus_f;
    slot_set("missing_gpu", missing);
    slot_set("throttle_gpu", throttled);
    slot_set("power_cap_gpu", capped);
    for (slot = 0; slot < count; slot++) {
        double idle, busy, limit;
        if (missing[slot]) continue; /* off the bus: NVML does not see it, it draws nothing */
        idle = GPU_IDLE_MW + slot * GPU_IDLE_STEP_MW;
        busy = throttled[slot] ? GPU_THROTTLED_MW : GPU_BUSY_MW + slot * GPU_BUSY_STEP_MW;
        limit = capped[slot] ? cap_mw : GPU_LIMIT_W * 1000.0;
        if (limit < busy) busy = limit;
        sum_mw += (long long)(idle + (busy - idle) * load + 0.5);
    }
    platform = PLATFORM_IDLE_W + (PLATFORM_LOAD_W - PLATFORM_IDLE_W) * load;
    over_pct = over_pct > 0.0 ? over_pct : 0.0;
    gpu_w = (double)sum_mw / 1000.0;
    return gpu_w + platform + gpu_w * over_pct / 100.0;
}

/* ------------------------------------------------------------------------------------ sdr */

static int temp(const char *key, const char *fallback, char *out, size_t size) {
    double v;
    const char *text = get(key, fallback);
    if (!parse_float(text, &v)) {
        fprintf(stderr, "%s: state key %s=%s is not a number\n", PROG, key, text);
        return 0;
    }
    snprintf(out, size, "%g degrees C", v);
    return 1;
}

/* The extended listing's sensor numbers and entity ids (IPMI entity 7 = system board, 10 = power
 * supply, 41 = processor/cooling): invented but stable, in the shape of the fixtures. */
static void elist_ids(const char *name, char *number, char *entity) {
    static const char *ids[][3] = {
        {"Inlet Temp", "04h", "7.1"},      {"Exhaust Temp", "05h", "7.1"}, {"Coolant Inlet", "30h", "41.1"},
        {"Coolant Outlet", "31h", "41.2"}, {"Avg Power", "50h", "7.1"},    {"Fan 1A Tach", "60h", "29.1"},
        {"Pump 1 Tach", "61h", "41.3"},    {"Leak Detect", "70h", "41.4"}, {"PSU Redundancy", "E8h", "21.1"},
    };
    size_t i;
    int psu;
    if (sscanf(name, "PSU%d Power In", &psu) == 1 && strstr(name, "Power In")) {
        sprintf(number, "%02Xh", 0x51 + psu);
        sprintf(entity, "10.%d", psu);
        return;
    }
    strcpy(number, "00h");
    strcpy(entity, "10.1");
    for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (!strcmp(ids[i][0], name)) {
            strcpy(number, ids[i][1]);
            strcpy(entity, ids[i][2]);
        }
    }
}

static void sdr_row(int elist, const char *name, const char *reading, const char *status) {
    if (elist) {
        char number[16], entity[16];
        elist_ids(name, number, entity);
        printf("%-16s | %s | %-3s | %4s | %s\n", name, number, status, entity, reading);
    } else {
        printf("%-16s | %-17s | %s\n", name, reading, status);
    }
}

static int sdr(int argc, char **args, const char *state_path) {
    char inlet[64], outlet[64], watts[64];
    struct timespec ts;
    double node_w;
    int elist = argc > 1 && !strcmp(args[1], "elist");
    int temps_only = argc > 2 && !strcmp(args[1], "type") && !strcmp(args[2], "temperature");
    const char *leak = get("leak", "0");
    int leaking = strcmp(leak, "") && strcmp(leak, "0");
    int i;
    clock_gettime(CLOCK_REALTIME, &ts);
    node_w = node_power_w(state_path, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    if (!temp("coolant_inlet", "30", inlet, sizeof inlet) || !temp("coolant_outlet", "38", outlet, sizeof outlet))
        return 1;
    sdr_row(elist, "Inlet Temp", "24 degrees C", "ok");
    sdr_row(elist, "Exhaust Temp", "41 degrees C", "ok");
    sdr_row(elist, "Coolant Inlet", inlet, "ok");
    sdr_row(elist, "Coolant Outlet", outlet, "ok");
    if (temps_only) return 0;
    /* Python's round(): half to even, which rint() does in the default rounding mode. */
    snprintf(watts, sizeof watts, "%.0f Watts", rint(node_w));
    sdr_row(elist, "Avg Power", watts, "ok");
    snprintf(watts, sizeof watts, "%.0f Watts", rint(node_w / PSUS));
    for (i = 1; i <= PSUS; i++) {
        char name[32];
        snprintf(name, sizeof name, "PSU%d Power In", i);
        sdr_row(elist, name, watts, "ok");
    }
    sdr_row(elist, "Fan 1A Tach", "4200 RPM", "ok");
    sdr_row(elist, "Pump 1 Tach", "3100 RPM", "ok");
    sdr_row(elist, "Leak Detect", leaking ? "0x01" : "0x00", leaking ? "cr" : "ok");
    sdr_row(elist, "PSU Redundancy", "0x00", "ok");
    return 0;
}

/* ------------------------------------------------------------------------------------ dcmi */

typedef struct {
    double stamp;
    long long watts;
} sample_t;

static sample_t g_history[HISTORY_MAX + 1];

/* power.py record_reading: keep the readings of the last period_s seconds (this one included) in
 * the history file; a read-only node directory keeps this reading only. */
static int record_reading(const char *state_path, long long watts, int period_s, double now) {
    char path[4096], tmp[4200], line[256];
    const char *base;
    int n = 0, i, fd;
    FILE *f;
    if (!state_path || !*state_path) {
        g_history[0].stamp = now;
        g_history[0].watts = watts;
        return 1;
    }
    if (snprintf(path, sizeof path, "%s.dcmi", state_path) >= (int)sizeof path) return 0;
    if ((f = fopen(path, "r"))) {
        while (fgets(line, sizeof line, f)) {
            double t;
            long long w;
            char extra;
            if (sscanf(line, "%lf %lld %c", &t, &w, &extra) != 2) continue;
            if (!(now - period_s < t && t <= now)) continue;
            if (n == HISTORY_MAX) { /* keep the newest */
                memmove(g_history, g_history + 1, sizeof(sample_t) * (HISTORY_MAX - 1));
                n--;
            }
            g_history[n].stamp = t;
            g_history[n++].watts = w;
        }
        fclose(f);
    }
    if (n == HISTORY_MAX) {
        memmove(g_history, g_history + 1, sizeof(sample_t) * (HISTORY_MAX - 1));
        n--;
    }
    g_history[n].stamp = now;
    g_history[n++].watts = watts;
    base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(tmp, sizeof tmp, "%.*s.%s.%ld", (int)(base - path), path, base, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && (f = fdopen(fd, "w"))) {
        int ok = 1;
        for (i = 0; i < n; i++) ok &= fprintf(f, "%.3f %lld\n", g_history[i].stamp, g_history[i].watts) > 0;
        ok &= fclose(f) == 0;
        if (!ok || rename(tmp, path) != 0) unlink(tmp);
    } else if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    return n;
}

static int dcmi_reading(const char *state_path) {
    char text[2048], stamp_text[64];
    struct timespec ts;
    double now, period_f;
    long long watts, min_w, max_w, sum = 0;
    int period_s, n, i, active, len;
    time_t stamp;
    if (is("dcmi_hang", "1"))
        for (;;) sleep(60); /* a BMC that never answers: only the caller's timeout ends this */
    if (is("dcmi_absent", "1")) {
        /* lprintf(LOG_ERR, "\n    DCMI request failed because: %s (%x)") for completion code 0xc1. */
        fputs("\n    DCMI request failed because: Invalid command (c1)\n", stderr);
        return 1;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    watts = (long long)(node_power_w(state_path, now) + 0.5);
    active = !is("dcmi_deactivated", "1");
    if (active) {
        period_f = number("dcmi_period_s", DCMI_PERIOD_S);
        period_s = isfinite(period_f) && period_f >= 1 && period_f < 1e9 ? (int)period_f : DCMI_PERIOD_S;
        n = record_reading(state_path, watts, period_s, now);
        min_w = max_w = watts;
        for (i = 0; i < n; i++) {
            if (g_history[i].watts < min_w) min_w = g_history[i].watts;
            if (g_history[i].watts > max_w) max_w = g_history[i].watts;
            sum += g_history[i].watts;
        }
        if (n == 0) { /* no room for the history file's name: the reading alone */
            n = 1;
            sum = watts;
        }
        stamp = ts.tv_sec;
        strftime(stamp_text, sizeof stamp_text, "%a %b %e %H:%M:%S %Y", localtime(&stamp));
    } else {
        period_s = 0; /* ipmitool prints the BMC's zero timestamp: the epoch */
        min_w = max_w = sum = watts;
        n = 1;
        stamp = 0;
        strftime(stamp_text, sizeof stamp_text, "%a %b %e %H:%M:%S %Y", gmtime(&stamp));
    }
    len = snprintf(text, sizeof text,
                   "\n"
                   "    Instantaneous power reading:              %8lld Watts\n"
                   "    Minimum during sampling period:           %8lld Watts\n"
                   "    Maximum during sampling period:           %8lld Watts\n"
                   "    Average power reading over sample period: %8lld Watts\n"
                   "    IPMI timestamp:                           %s\n"
                   "    Sampling period:                          %08d Seconds.\n"
                   "    Power reading state is:                   %s\n"
                   "\n",
                   watts, min_w, max_w, (long long)((double)sum / n + 0.5), stamp_text, period_s,
                   active ? "activated" : "deactivated");
    if (is("dcmi_garbage", "1")) {
        /* A BMC answering half a record: the first lines, cut mid-number, then junk. */
        char *cut = strstr(text, "Maximum");
        srand((unsigned)(ts.tv_nsec ^ getpid()));
        len = (int)(cut - text);
        memcpy(cut, "Maximum during sa\0\a", 19);
        len += 19;
        for (i = 0; i < 48; i++) text[len++] = (char)(0x21 + rand() % (0x7E - 0x21 + 1));
        text[len++] = '\n';
    }
    fwrite(text, 1, (size_t)len, stdout);
    return 0;
}

/* ------------------------------------------------------------------------------------ fru */

#define PSUS 6 /* an HGX H100 node's power supplies (see the top of this file) */

static unsigned long long fnv1a(const char *text) {
    unsigned long long h = 1469598103934665603ULL;
    for (; *text; text++) {
        h ^= (unsigned char)*text;
        h *= 1099511628211ULL;
    }
    return h;
}

/* Whether `n` is in a list such as "2" or "2,5". */
static int listed(const char *list, int n) {
    const char *p = list;
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return 0;
        if (v == n) return 1;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}

static int fru(void) {
    const char *node = get("node", "");
    const char *swapped = get("swap_psu", "");
    char seed[512];
    int i;
    snprintf(seed, sizeof seed, "%s/chassis", node);
    printf("FRU Device Description : Builtin FRU Device (ID 0)\n");
    printf(" Chassis Type          : Rack Mount Chassis\n");
    printf(" Chassis Serial        : CH%010llu\n", fnv1a(seed) % 10000000000ULL);
    printf(" Product Manufacturer  : Kiln Simulated Systems\n");
    printf(" Product Name          : HGX H100 8-GPU node\n\n");
    for (i = 1; i <= PSUS; i++) {
        snprintf(seed, sizeof seed, "%s/psu%d%s", node, i, listed(swapped, i) ? "/swap" : "");
        printf("FRU Device Description : PSU%d (ID %d)\n", i, 10 + i);
        printf(" Product Manufacturer  : DELTA\n");
        printf(" Product Name          : ECD16010092\n");
        printf(" Product Serial        : DTH%010llu\n\n", fnv1a(seed) % 10000000000ULL);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ main */

/* ipmitool's global options that take a value (ipmitool(1)): skipped with their value. */
static int takes_value(const char *arg) {
    static const char *opts = " -I -H -U -P -L -C -N -R -p -y -k -f -A -t -b -T -B -l -m -o -O -e -z -g -s ";
    char probe[8];
    if (strlen(arg) != 2) return 0;
    snprintf(probe, sizeof probe, " %s ", arg);
    return strstr(opts, probe) != NULL;
}

int main(int argc, char **argv) {
    const char *state_path = getenv("KILN_SIM_STATE");
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    int n = 0, i;
    if (!args) return 1;
    /* The command words, global options (and their values) left out. */
    for (i = 1; i < argc; i++) {
        if (takes_value(argv[i]))
            i++;
        else if (argv[i][0] != '-')
            args[n++] = argv[i];
    }
    if (!n || (strcmp(args[0], "sdr") && strcmp(args[0], "dcmi") && strcmp(args[0], "fru"))) {
        fprintf(stderr, "%s: only 'sdr', 'dcmi power reading' and 'fru print' are supported\n", PROG);
        return 1;
    }
    read_state(state_path);
    if (!strcmp(args[0], "fru")) {
        if (n > 2 || (n == 2 && strcmp(args[1], "print"))) {
            fprintf(stderr, "%s: only 'fru print' is supported\n", PROG);
            return 1;
        }
        return fru();
    }
    if (!strcmp(args[0], "dcmi")) {
        if (n != 3 || strcmp(args[1], "power") || strcmp(args[2], "reading")) {
            fprintf(stderr, "%s: only 'dcmi power reading' is supported\n", PROG);
            return 1;
        }
        return dcmi_reading(state_path);
    }
    return sdr(n, args, state_path);
}
