"""Simulated GPU node tools: a fake libnvidia-ml.so.1 and a fake nvidia-smi.

A simulated node is a process environment (see `node_env`) whose PATH finds the fake nvidia-smi,
whose LD_LIBRARY_PATH finds the fake NVML (loaded by the real pynvml), whose KILN_SIM_STATE
names a key=value state file describing the node and its injected faults, and whose KILN_NODE_ROOT
names the node's own file tree (`<state file>.root`: its sysfs, testbed/sim/node_root.py), which
`write_state` writes for the state and a test may then write a fault into (`write_node_file`):

    build = build_simulator(Path("testbed/build/sim"))
    write_state(state_file, node="gpu01", ecc_uncorrectable_gpu=3)
    subprocess.run(["python3", "-"], input=probe_source(), env=node_env(build, state_file), ...)

State keys (absent = the healthy default, an 8x H100 SXM node):
    gpus=8  model=NVIDIA H100 80GB HBM3  driver=550.54.15  cuda=12040 (NVML int form)
    vbios=96.00.89.00.01  serial_prefix=16549220
    node=NAME (seeds UUIDs/serials; default gethostname(); `uuid_seed` is an alias)
Faults (GPU values are physical slots, "3" or a list "1,5"):
    missing_gpu  swap_gpu (another board in the slot: its own UUID and serial, as after a swap)
    swap_psu (fake_ipmitool.c `fru print`: PSU N, 1-6, is another unit with its own serial)
    ecc_uncorrectable_gpu (+ ecc_uncorrectable_count=2)  ecc_corrected_gpu
    (+ ecc_corrected_count=5)  remap_pending_gpu  remap_failure_gpu  ecc_disabled_gpu
    temp_gpu (+ temp_value=90)  pcie_degraded_gpu (gen 4 x8; the simulated nvbandwidth's host copies
    of that GPU scale with it: a quarter)  power_cap_gpu (enforced power limit power_cap_w=500
    instead of 700 W)  topo_nic_far_gpu (nvidia-smi topo -m: that GPU's rail NIC
    mlx5_N sits on a root port of the other socket, SYS from its GPU, so no NIC is PIX/PXB to it)
    hang=1 (nvmlInit, nvidia-smi and nvbandwidth block forever)  garbage=1 (nvmlInit fails with a
    driver/library version mismatch, nvidia-smi and nvbandwidth print junk)  nvml_absent=1 (nvmlInit fails
    with LIBRARY_NOT_FOUND; nvidia-smi works)  delay_ms=N (a slow, healthy node: nvmlInit and
    nvidia-smi take N ms)  flood_mb=N (nvidia-smi prints N MiB of binary junk instead of its
    answer: byte i of the stream is i % 256, NUL and non-UTF-8 included; NVML is unaffected)
Node configuration (nvidia-smi -q and -q -x alike; tools/systemctl, tools/lspci, tools/cat):
    persistence_off_gpu  mig_gpu (MIG Enabled)  app_clocks_low_gpu (+ app_clock_mhz=1410: the
    graphics applications clock below its default)  fabric_manager_down=1 (nvidia-fabricmanager
    failed; every GPU's Fabric State "In Progress", Status "N/A")  acs_on=1 (ACSCtl SrcValid+
    ReqRedir+ CmpltRedir+ on the PCIe switch port above GPU 0)  lspci_denied=1 (lspci as a user
    other than root: "Capabilities: <access denied>")  cmdline=LINE (what `cat /proc/cmdline`
    prints; default: a healthy line with intel_iommu=on iommu=pt)
RDMA (tools/ib_write_bw, tools/ib_write_lat: perftest whose server and client really connect over
TCP): the ibstat keys ib_port_rate / ib_port_down, plus ib_cable_fault=mlx5_k:PEER (a bad cable
between this node's mlx5_k and PEER's: that pair at ib_cable_factor=0.25 of its rate, both ways) and
perftest_cuda_host=1 (--use_cuda allocates host memory: GPUDirect asked, not done).
Filesystem (tools/fio, tools/mdtest): fs_factor=F (fio's bandwidth x F)  mds_slow=F (mdtest's
    metadata rates / F, e.g. 20)  mds_hang=1 (mdtest blocks after its header)  mdtest_garbage=1
    (mdtest prints junk instead of its summary, exit 0). mdtest really creates, stats, reads and
    removes a few files in its -d directory; the rates it prints are a model.
Other tools' keys are listed in FAULT_KEYS below and in each tool's docstring (testbed/sim/tools/).

Slurm containers and the cluster software stack (tools/srun, nvidia-smi, all_reduce_perf, ofed_info,
ucx_info, enroot, ldconfig, dpkg-query): `srun --container-image=IMAGE` runs its program "inside"
IMAGE on the node named (nvidia-smi --query-gpu and all_reduce_perf answer as there).
    container_pull_fail=1 (or an HTTP status: 401, 404, 503; 1 = 404) on the node named: pyxis'
    and enroot's own import-failure lines, exit 1  container_gpus=N (only N GPUs visible inside
    the container)  container_driver=VERSION (the driver the container reports)  pyxis_absent=1
    (srun on this node has no pyxis: "srun: unrecognized option '--container-image=...'")
    stack_version_skew=COMPONENT:VERSION[,COMPONENT:VERSION] (this node's version of nccl,
    ofed, ucx, enroot, pyxis or slurm; defaults NCCL 2.21.5, MLNX_OFED_LINUX-23.10-1.1.9.0, UCX
    1.16.0, Enroot 3.4.1, pyxis 0.19.0-1, Slurm 23.11.4)

Power (testbed/sim/power.py, one model for every reader): a node draws its GPUs' power as NVML
reports it (idle ~70 W each; under the simulated gpu_burn 650-685 W, 480 W when throttling, never
above the enforced limit, so a power_cap_gpu draws its cap) plus a platform overhead of 900 W idle
rising to 1,500 W under load, with the same load ramp. `ipmitool` (fake_ipmitool.c, compiled like
the fake NVML, mirroring power.py) `dcmi power reading` prints that
instant (and min/max/avg over the readings of the last dcmi_period_s seconds, default 60, kept in
"$KILN_SIM_STATE.dcmi"); `ipmitool sdr` shows it as "Avg Power" and six "PSUn Power In" rows;
nvidia-smi's power_draw follows the load like NVML's; the testbed's Redfish PDU/CDU service
(testbed/sim/redfish_facility.py) derives phase currents and coolant readings from it.
    power_over_pct=P (the node draws P% of its GPU sum on top: 30 = 30% over its GPUs)
    dcmi_period_s=S  dcmi_absent=1 (DCMI unsupported: ipmitool's "DCMI request failed because:
    Invalid command (c1)" on stderr, exit 1; sdr still answers)  dcmi_deactivated=1 (no
    statistics: min = max = avg = now, epoch timestamp, period 0, "deactivated")  dcmi_hang=1 (the
    BMC never answers)  dcmi_garbage=1 (a truncated reading, then junk). The GPU-driver faults
    (hang, garbage, delay_ms, flood_mb) leave the BMC alone: a wedged driver still draws power.

Facility (testbed/sim/facility.py, served as Redfish by testbed/sim/redfish_facility.py:
`python -m testbed.sim.redfish_facility --config FILE --state-dir NODES --bind ADDR --port N`):
rack PDUs (RackPDUs/{id}, Mains/{circuit}: per-phase current = sum(node power x share) / voltage)
and CDUs (CDUs/{id}/PrimaryCoolantConnectors/1: flow, supply, return = supply + heat / (flow x
density x specific heat), heat = 0.9 x the loop's node power) from NODES/NAME/state, with HTTP basic
auth. Its faults live in its JSON config, not in node state: `miscabled` on a PDU (nodes' feeds and
extra amps land on one phase), `low_flow` on a loop (flow x factor: the return warms, the captured
share falls below 80%). The config is re-read when rewritten, so faults change without a restart.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.sim.node_root import NODE_ROOT_ENV, write_tree
from testbed.sim.node_root import node_root as node_root  # re-exported: tests reach a node's tree here
from testbed.sim.node_root import write_node_file as write_node_file

SIM_DIR = Path(__file__).resolve().parent
NVML_SOURCE = SIM_DIR / "fake_nvml.c"
NVIDIA_SMI_SOURCE = SIM_DIR / "nvidia-smi"
# Every file here is a simulated node-side tool, installed into bin/ under its own name.
TOOLS_DIR = SIM_DIR / "tools"
# Tools installed under another name too (the tool reads its argv[0]): name -> file in TOOLS_DIR.
TOOL_ALIASES: dict[str, str] = {"alltoall_perf": "all_reduce_perf"}
# The node power model (power.py), installed into bin/ under this name for the tools that import it.
POWER_SOURCE = SIM_DIR / "power.py"
POWER_MODULE = "kiln_sim_power.py"
# The text form of `nvidia-smi -q` (nvsmi_text.py), installed beside nvidia-smi under this name.
NVSMI_TEXT_SOURCE = SIM_DIR / "nvsmi_text.py"
NVSMI_TEXT_MODULE = "kiln_sim_nvsmi_text.py"
LIB_NAME = "libnvidia-ml.so.1"
# The simulated BMC tool, compiled into bin/ under this name.
IPMITOOL_SOURCE = SIM_DIR / "fake_ipmitool.c"
IPMITOOL_NAME = "ipmitool"

# Written explicitly into every state file so that the file documents the whole node.
DEFAULTS: dict[str, str] = {
    "gpus": "8",
    "model": "NVIDIA H100 80GB HBM3",
    "driver": "550.54.15",
    "cuda": "12040",
    "vbios": "96.00.89.00.01",
    "serial_prefix": "16549220",
}
FAULT_KEYS: frozenset[str] = frozenset(
    {
        "missing_gpu",
        "swap_gpu",
        # Another power supply in this bay (ipmitool fru: its own serial).
        "swap_psu",
        "ecc_uncorrectable_gpu",
        "ecc_uncorrectable_count",
        "ecc_corrected_gpu",
        "ecc_corrected_count",
        "remap_pending_gpu",
        "remap_failure_gpu",
        "ecc_disabled_gpu",
        "temp_gpu",
        "temp_value",
        "pcie_degraded_gpu",
        "power_cap_gpu",
        "power_cap_w",
        "hang",
        "garbage",
        "flood_mb",
        "nvml_absent",
        "delay_ms",
        # NCCL (all_reduce_perf, alltoall_perf, mpirun): slow NVLink = this node's busbw x factor; wrong
        # results; a slow network port: any multi-node run that includes this node is slow; a long
        # run (s). alltoall_perf across nodes also slows down with ib_port_rate / ib_port_down.
        "nccl_busbw_factor",
        "nccl_wrong",
        "net_slow_factor",
        "nccl_run_s",
        # gpu_burn: compute errors on a GPU; "OK" with 0 Gflop/s; gflops per GPU.
        "burn_errors_gpu",
        "burn_errors_count",
        "burn_zero_gflops",
        "burn_gflops",
        # Under load (while gpu_burn runs): one GPU hotter by hot_delta C; a thermal throttle.
        "hot_gpu",
        "hot_delta",
        "throttle_gpu",
        # Kernel log: an Xid event (code, on GPU slot).
        "xid",
        "xid_gpu",
        # InfiniBand: a port down, or at a lower rate ("mlx5_2:200"). perftest (tools/ib_write_bw,
        # ib_write_lat) reads these too, and: a bad cable between this node's HCA and one peer
        # ("mlx5_1:gpu02": that pair runs at ib_cable_factor of its rate, default 0.25, both ways);
        # --use_cuda allocating host memory instead of GPU memory.
        "ib_port_down",
        "ib_port_rate",
        "ib_cable_fault",
        "ib_cable_factor",
        "perftest_cuda_host",
        # NVLink: links of a GPU inactive (nvidia-smi nvlink; nvbandwidth's peer copies of it over PCIe).
        "nvlink_down_gpu",
        # PCIe topology (nvidia-smi topo -m): this GPU slot's rail NIC sits on the other socket.
        "topo_nic_far_gpu",
        # Filesystem: this node's fio throughput x factor; mdtest's metadata rates / factor, mdtest
        # blocking forever (a metadata server that stopped answering), mdtest printing junk.
        "fs_factor",
        "mds_slow",
        "mds_hang",
        "mdtest_garbage",
        # Software and firmware identity.
        "kernel",
        "os_release",
        "nic_fw",
        # Coolant/leak sensors (ipmitool sdr, Redfish): inlet/outlet C, leak detected.
        "coolant_inlet",
        "coolant_outlet",
        "leak",
        # Node power (power.py; ipmitool dcmi/sdr, the Redfish PDU/CDU service): the node draws this
        # percentage of its GPU sum on top; the BMC's statistics window (s); the BMC has no DCMI, no
        # DCMI statistics, never answers, answers junk.
        "power_over_pct",
        "dcmi_period_s",
        "dcmi_absent",
        "dcmi_deactivated",
        "dcmi_hang",
        "dcmi_garbage",
        # GPU node configuration (gpu_config: nvidia-smi -q / -q -x, systemctl, lspci, cat): persistence
        # off, MIG on, applications clocks held low (at app_clock_mhz) on a GPU; the fabric manager
        # failed (and every GPU's fabric registration stuck In Progress); ACS on the switch port
        # above GPU 0; lspci run without root; the kernel command line.
        "persistence_off_gpu",
        "mig_gpu",
        "app_clocks_low_gpu",
        "app_clock_mhz",
        "fabric_manager_down",
        "acs_on",
        "lspci_denied",
        "cmdline",
        # Slurm container path and the cluster software stack (slurm_container, sw_consistency):
        # the image import fails (1 or an HTTP status); GPUs and driver seen inside the container;
        # srun without pyxis; this node's version of a stack component ("enroot:3.4.0").
        "container_pull_fail",
        "container_gpus",
        "container_driver",
        "pyxis_absent",
        "stack_version_skew",
    }
)
# listen_address: the address the simulated perftest server binds (tools/ib_write_bw), for nodes
# that share one host's network (the demo's local transport gives each a loopback address).
KNOWN_KEYS: frozenset[str] = frozenset(DEFAULTS) | FAULT_KEYS | {"node", "uuid_seed", "listen_address"}


@dataclass(frozen=True)
class SimPaths:
    """Where a built simulator lives: put bin_dir on PATH and lib_dir on LD_LIBRARY_PATH."""

    bin_dir: Path
    lib_dir: Path


def _up_to_date(target: Path, source: Path) -> bool:
    return target.exists() and target.stat().st_mtime >= source.stat().st_mtime


def _build_cache() -> Path | None:
    """This user's cache of compiled simulator binaries (a test session builds the simulator in
    every testbed and test folder: 150 compiles of the same two files cost 50 s of CPU). None when
    the folder is not this user's alone: a binary another user could plant is never loaded."""
    folder = Path(tempfile.gettempdir()) / f"kiln-sim-build-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None
    if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return folder


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _compile(source: Path, target: Path, flags: list[str], libs: list[str] | None = None) -> None:
    """gcc (or $CC) `source` into `target`: written to a temporary name and renamed into place. The
    same source, compiler and flags are compiled once per user (`_build_cache`) and copied after."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or "/usr/bin/gcc"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    argv = [compiler, "-O2", "-Wall", *flags, "-o", tmp_name, str(source), *(libs or [])]
    cache = _build_cache()
    # The key: the source's bytes, the compiler (path and its file's time: an upgrade rebuilds), flags.
    built_by = [compiler, str(_mtime_ns(compiler)), "-O2", "-Wall", *flags, *(libs or [])]
    key = hashlib.sha256("\0".join(built_by).encode() + source.read_bytes()).hexdigest()
    cached = cache / f"{target.name}-{key[:32]}" if cache else None
    if cached is not None and cached.is_file():
        shutil.copyfile(cached, tmp_name)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, target)
        return
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as err:
        os.unlink(tmp_name)
        raise RuntimeError(f"cannot run {compiler}: {err}") from err
    if proc.returncode != 0:
        os.unlink(tmp_name)
        raise RuntimeError(f"building {target.name} failed ({' '.join(argv)}):\n{proc.stderr}")
    os.chmod(tmp_name, 0o755)  # sshd-spawned node shells may run as another user
    if cached is not None:
        fd, cache_tmp = tempfile.mkstemp(prefix=f".{cached.name}.", dir=cached.parent)
        os.close(fd)
        shutil.copyfile(tmp_name, cache_tmp)
        os.replace(cache_tmp, cached)
    os.replace(tmp_name, target)


def build_simulator(dest: Path) -> SimPaths:
    """Compile the fake NVML into dest/lib and the fake ipmitool into dest/bin, and install
    nvidia-smi and the other simulated tools into dest/bin.

    Skips work that is up to date. Each file is written to a temporary name and renamed into
    place, so parallel test workers sharing `dest` never load a half-written library.
    """
    dest = Path(dest).resolve()
    bin_dir, lib_dir = dest / "bin", dest / "lib"
    bin_dir.mkdir(parents=True, exist_ok=True)
    lib_dir.mkdir(parents=True, exist_ok=True)

    lib = lib_dir / LIB_NAME
    if not _up_to_date(lib, NVML_SOURCE):
        _compile(NVML_SOURCE, lib, ["-shared", "-fPIC", "-Wl,-soname," + LIB_NAME])
    # The BMC is read once per sample of every soak and burn-in on every node: compiled, not a Python
    # process per reading (fake_ipmitool.c says why).
    ipmitool = bin_dir / IPMITOOL_NAME
    if not _up_to_date(ipmitool, IPMITOOL_SOURCE):
        _compile(IPMITOOL_SOURCE, ipmitool, [], libs=["-lm"])

    # nvidia-smi, then every simulated tool in tools/ (all_reduce_perf, gpu_burn, fio, ibstat, ...) and
    # its aliases (alltoall_perf),
    # then the power model nvidia-smi shares with the facility service and the text form of nvidia-smi
    # -q, as plain modules beside them.
    tools = sorted(p for p in TOOLS_DIR.iterdir() if p.is_file() and not p.name.startswith("."))
    installs = [(NVIDIA_SMI_SOURCE, NVIDIA_SMI_SOURCE.name, 0o755), *((p, p.name, 0o755) for p in tools)]
    installs += [(TOOLS_DIR / source, alias, 0o755) for alias, source in TOOL_ALIASES.items()]
    installs.append((POWER_SOURCE, POWER_MODULE, 0o644))
    installs.append((NVSMI_TEXT_SOURCE, NVSMI_TEXT_MODULE, 0o644))
    for source, name, mode in installs:
        target = bin_dir / name
        if _up_to_date(target, source):
            continue
        # A copy, not a symlink: dest can then be carried to other hosts or namespaces as is.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", dir=bin_dir)
        os.close(fd)
        shutil.copyfile(source, tmp_name)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    return SimPaths(bin_dir=bin_dir, lib_dir=lib_dir)


def write_state(path: Path, *, node: str, **faults: str | int) -> None:
    """Atomically write a node's state file: healthy defaults, overridden by `faults`.

    Unknown keys raise ValueError (a typo must not silently make a healthy node). Clearing
    faults is writing the state again without them.
    """
    unknown = sorted(set(faults) - KNOWN_KEYS)
    if unknown:
        raise ValueError(
            f"unknown simulator state key(s): {', '.join(unknown)}; known: {', '.join(sorted(KNOWN_KEYS))}"
        )
    values: dict[str, str] = {**DEFAULTS, "node": node}
    for key, value in faults.items():
        if isinstance(value, bool):
            value = int(value)
        values[key] = str(value)
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            raise ValueError(f"state value for {key!r} must be one line: {value!r}")
    text = "# Kiln simulated GPU node state (testbed/sim)\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp_name, 0o644)  # sshd-spawned node shells may run as another user
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    write_tree(path, values)


def read_state(path: Path) -> dict[str, str]:
    """Parse a state file (key=value lines, `#` comments) into a dict; no defaults added."""
    state: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        state[key.strip()] = value.strip()
    return state


def node_env(paths: SimPaths, state_file: Path) -> dict[str, str]:
    """The environment of a simulated node (only these keys; merge into a base env if needed).

    python3 resolves to this interpreter's directory (it has pynvml), after the simulator's bin.
    """
    python_dir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{paths.bin_dir}:{python_dir}:/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(paths.lib_dir),
        "KILN_SIM_STATE": str(Path(state_file).resolve()),
        NODE_ROOT_ENV: str(node_root(state_file)),
    }
