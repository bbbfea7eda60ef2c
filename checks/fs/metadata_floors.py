"""Per-node metadata floors of fs_metadata (checks/fs/metadata.py) by filesystem class, with their
sources, and how a floor is chosen for one operation.

The floors are ops/s per node, the mean over mdtest's iterations, for fs_metadata's default run:
ONE mdtest process per node, 1,000 files and 1,000 directories per iteration, 4 KiB written to and
read from each file. One process is latency-bound (one metadata round trip at a time), so a floor
here is far below what the filesystem serves in aggregate; more tasks per node only raise the rate.
Every node of a run tests at about the same time: a metadata service that hundreds of nodes
saturate can put a healthy node below its floor (the run's outliers and fs_metadata_aggregate say
which it is). Conservative defaults; tune per site.
"""

from __future__ import annotations

from typing import Any

# The operations judged against a floor (mdtest's file phases); the directory and tree phases are
# recorded only.
JUDGED = ("file_creation", "file_stat", "file_read", "file_removal")
ANY = "any"  # the lowest floor any class sets, per operation: judged whatever the filesystem is
NONE = "none"  # recorded, never judged (warn)

CLASS_FLOORS: dict[str, dict[str, float | None]] = {
    # Lustre. Dell white paper "Dell Storage for HPC with Intel Enterprise Edition for Lustre"
    # (mdtest 1.9.3, Lustre 2.5, 15K RPM MDT, "Metadata Testing"): ONE thread creates "less than
    # 504" files/s, stats "over 2K", removes "over 1.8K" ops/s. For scale, a modern MDT is far
    # faster: the SJTU mdtest-3.3.0 run (1 task, tests/fixtures/mdtest/mdtest-3.3.0-*) creates
    # 24,964, stats 528,648, reads 176,264 and removes 20,943 files/s; DDN's EXAScaler Cloud IO500
    # (Lustre 2.14 on Azure, tests/fixtures/mdtest/io500-*: 4 clients x 16 tasks, a saturated MDS)
    # gives per client 9,477/4 = 2,369 creates (easy-write), 8,929 stats, 1,923 deletes and 1,568
    # reads (hard-read) per second. Floors at the one-thread figures of that 2015 spinning-disk
    # MDT: a node below them is broken. Read has no one-thread figure: the create floor (both open
    # a file, move 4 KiB and close it). Conservative.
    "lustre": {"file_creation": 500.0, "file_stat": 2000.0, "file_read": 500.0, "file_removal": 1000.0},
    # GPFS / IBM Storage Scale. Dell EMC Ready Solution for HPC PixStor Storage (Spectrum Scale;
    # mdtest over 16 clients, empty files, threads spread round robin): create peaks at 194.2K
    # ops/s with 512 threads, removal at 169.4K with 16 (one thread per client), stat at 11.2M and
    # read at 4.8M with 64. Only aggregates are published, so per-thread shares at each peak:
    # create 379, removal 10.6K, stat 175K, read 75K ops/s. Derived, conservative: create below the
    # most contended share (300), stat, read and removal at about a tenth of theirs or less.
    "gpfs": {"file_creation": 300.0, "file_stat": 15000.0, "file_read": 7500.0, "file_removal": 1000.0},
    # WEKA: no per-client mdtest figure is published (docs.weka.io "WEKA performance tests" measure
    # with fio / wekatester only): not judged until the site sets min_<operation>_ops.
    "weka": {op: None for op in JUDGED},
    # NFS: no published per-client mdtest figure found (Dell's NSS-HA white papers chart mdtest
    # creates/stats/removes against client count without printed values); the rate depends on the
    # server's stable storage (NFS creates are synchronous): set per site.
    "nfs": {op: None for op in JUDGED},
}
FS_CLASSES = (ANY, *CLASS_FLOORS, NONE)


def _lowest(op: str) -> float | None:
    values = [f[op] for f in CLASS_FLOORS.values() if f[op] is not None]
    return min(v for v in values if v is not None) if values else None


# "any": per operation the lowest floor of the classes that set one (lustre and gpfs today).
ANY_FLOORS: dict[str, float | None] = {op: _lowest(op) for op in JUDGED}


def floor_for(thresholds: Any, op: str, field: str) -> tuple[float | None, str]:
    """(floor, where it comes from) for one judged operation: the site's own `field`
    (min_<op>_ops, min_aggregate_<op>_ops) when set, else the class's floor; the second item
    completes "below the N ops/s floor..."."""
    explicit = getattr(thresholds, field)
    if explicit is not None:
        return float(explicit), f" ({field})"
    fs_class = thresholds.fs_class
    if fs_class == NONE:
        return None, ""
    if fs_class == ANY:
        return ANY_FLOORS[op], " for any filesystem class"
    return CLASS_FLOORS[fs_class][op], f" for {fs_class}"
