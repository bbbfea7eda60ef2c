"""CPU per simulated BMC reading: the compiled ipmitool (testbed/sim/fake_ipmitool.c) against the
Python simulator it replaced, in one run on this machine.

    python bench/bench_bmc_sim.py [--reads 100] [--soak-s 20]

The Python simulator (testbed/sim/tools/ipmitool with the power.py of its day) is taken from git:
the parent of the commit that removed it. Each reading is one process, as the probe runs it; CPU is
the children's user + system time (getrusage RUSAGE_CHILDREN) over --reads readings of `ipmitool
dcmi power reading` and of `ipmitool sdr elist`, on a healthy node under steady simulated load.
With --soak-s > 0 also one heat-soak node as the demo runs it (the probe's sampling mode with
--node-power at 1 Hz around the simulated gpu_burn): that node's whole CPU per sample, to show
what share of a soak node the BMC readings were.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checks.probe import probe_source
from testbed.sim import build_simulator, node_env, write_state

REPO = Path(__file__).resolve().parent.parent
OLD_TOOL = "testbed/sim/tools/ipmitool"
READINGS = (("dcmi power reading", ["dcmi", "power", "reading"]), ("sdr elist", ["sdr", "elist"]))


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def python_simulator(dest: Path) -> Path | None:
    """The removed Python ipmitool and its power model, from git, in dest (None without git history)."""
    gone = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--diff-filter=D", "--", OLD_TOOL],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if gone.returncode != 0:
        return None
    revision = f"{gone.stdout.strip()}^" if gone.stdout.strip() else "HEAD"
    dest.mkdir(parents=True, exist_ok=True)
    for path, name in ((OLD_TOOL, "ipmitool"), ("testbed/sim/power.py", "kiln_sim_power.py")):
        shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, capture_output=True, check=False)
        if shown.returncode != 0:
            return None
        (dest / name).write_bytes(shown.stdout)
    (dest / "ipmitool").chmod(0o755)
    return dest


def per_reading(env: dict[str, str], argv: list[str], reads: int) -> tuple[float, float]:
    """(CPU s, wall s) per reading."""
    cpu, wall = cpu_children(), time.monotonic()
    for _ in range(reads):
        subprocess.run(["ipmitool", *argv], env=env, capture_output=True, check=True)
    return (cpu_children() - cpu) / reads, (time.monotonic() - wall) / reads


def soak_node(env: dict[str, str], seconds: int) -> tuple[float, int]:
    """(CPU s per sample, readings) of one soak node: probe --sample 1 --node-power -- gpu_burn -tc."""
    cpu = cpu_children()
    argv = ["python3", "-", "--sample", "1", "--node-power", "--", "gpu_burn", "-tc", str(seconds)]
    proc = subprocess.run(argv, input=probe_source(), env=env, capture_output=True, text=True, check=False)
    spent = cpu_children() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"the probe failed ({proc.returncode}): {proc.stderr[-500:]}")
    readings = int(proc.stdout.split('"readings":', 1)[1].split(",", 1)[0])
    return spent / max(1, readings), readings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--soak-s", type=int, default=20, help="seconds of one soak node (0: skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-bmc-") as tmp:
        root = Path(tmp)
        sim = build_simulator(root / "sim")
        state = root / "node" / "state"
        write_state(state, node="bench01")
        marker = Path(f"{state}.load")  # steady simulated load, as during a soak
        marker.write_text(f"{os.getpid()}\n")
        os.utime(marker, (time.time() - 60, time.time() - 60))
        compiled = {**os.environ, **node_env(sim, state)}
        old = python_simulator(root / "python-bin")
        if old is None:
            print("no git history with the Python simulator: only the compiled one is measured")
        python = {**compiled, "PATH": f"{old}:{compiled['PATH']}"} if old else None
        print(f"CPU per reading over {args.reads} readings (children's user+sys; wall in brackets)")
        for label, argv in READINGS:
            c_cpu, c_wall = per_reading(compiled, argv, args.reads)
            line = f"  {label:<20} compiled {c_cpu * 1000:7.2f} ms ({c_wall * 1000:6.1f} ms)"
            if python:
                p_cpu, p_wall = per_reading(python, argv, args.reads)
                line += f"   python {p_cpu * 1000:7.2f} ms ({p_wall * 1000:6.1f} ms)   ratio {p_cpu / c_cpu:5.1f}x"
            print(line)
        if args.soak_s > 0:
            marker.unlink()  # the soak's gpu_burn keeps its own marker
            print(f"one soak node, {args.soak_s} s at 1 Hz (probe + gpu_burn + BMC readings): CPU per sample")
            c_cpu, readings = soak_node(compiled, args.soak_s)
            line = f"  compiled {c_cpu * 1000:7.1f} ms ({readings} readings)"
            if python:
                p_cpu, readings = soak_node(python, args.soak_s)
                line += f"   python {p_cpu * 1000:7.1f} ms ({readings} readings)   ratio {p_cpu / c_cpu:5.1f}x"
            print(line)


if __name__ == "__main__":
    main()
