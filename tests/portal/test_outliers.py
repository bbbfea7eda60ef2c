"""Fleet outliers, the pure math: modified z-score (median/MAD), the bad side only, guards."""

from __future__ import annotations

import pytest

from portal.runs import outliers
from portal.runs.outliers import Outlier, find_outliers, fleet_outliers, robust_scale

BUSBW = {"n01": 468.0, "n02": 470.0, "n03": 466.0, "n04": 469.0, "n05": 467.0, "n06": 471.0, "n07": 402.0}


def metric(kind: str, key: str) -> outliers.Metric:
    return next(m for m in outliers.METRICS[kind] if m.key == key)


def test_it_flags_the_node_that_lags_the_fleet_median() -> None:
    found = find_outliers(BUSBW, low_is_bad=True)

    assert list(found) == ["n07"]
    assert found["n07"].median == 468.0
    # MAD of |x - 468| = [0, 2, 2, 1, 1, 3, 66] is 2; z = (402 - 468) / (1.4826 * 2)
    assert found["n07"].z == pytest.approx(-66 / (1.4826 * 2))
    assert found["n07"].deviation == pytest.approx(-66 / 468)


def test_it_ignores_nodes_that_are_better_than_their_peers() -> None:
    fast = {**BUSBW, "n07": 540.0}
    assert find_outliers(fast, low_is_bad=True) == {}
    assert list(find_outliers(fast, low_is_bad=False)) == ["n07"]


def test_it_flags_a_hot_node_when_high_is_bad() -> None:
    temps = {"a": 70.0, "b": 71.0, "c": 69.5, "d": 70.5, "e": 70.0, "f": 79.0, "g": 60.0}
    found = find_outliers(temps, low_is_bad=False)
    assert list(found) == ["f"]  # the cool one (g) is not a problem
    assert found["f"].z > 3.5


def test_it_does_not_flag_noise_in_a_tight_fleet() -> None:
    # MAD is tiny, so 2 % below scores |z| far above 3.5: the 5 % floor keeps it quiet.
    tight = {f"n{i}": 100.0 + i * 0.01 for i in range(8)} | {"slow": 98.0}
    assert robust_scale(list(tight.values()))[1] < 0.1
    assert find_outliers(tight, low_is_bad=True) == {}
    assert list(find_outliers(tight, low_is_bad=True, min_relative_deviation=0.01)) == ["slow"]


def test_it_needs_five_nodes_with_the_metric() -> None:
    four = {"a": 468.0, "b": 470.0, "c": 469.0, "d": 300.0}
    assert find_outliers(four, low_is_bad=True) == {}
    assert list(find_outliers({**four, "e": 467.0}, low_is_bad=True)) == ["d"]
    assert find_outliers({**four, "e": None, "f": float("nan")}, low_is_bad=True) == {}  # type: ignore[dict-item]


def test_it_falls_back_to_the_mean_absolute_deviation_when_mad_is_zero() -> None:
    same = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0, "e": 100.0, "f": 80.0}
    median, scale = robust_scale(list(same.values()))
    assert (median, scale) == (100.0, pytest.approx(1.253314 * 20 / 6))
    assert list(find_outliers(same, low_is_bad=True)) == ["f"]
    assert find_outliers(dict.fromkeys("abcdef", 100.0), low_is_bad=True) == {}


def test_it_states_the_deviation_in_the_reason() -> None:
    reason = outliers.reason(metric("nccl_allreduce", "busbw"), Outlier(value=402.0, median=468.0, z=-5.2))
    assert reason == "outlier: busbw 402 GB/s is 14% below the fleet median 468 GB/s (robust z -5.2)"
    hot = outliers.reason(metric("dlc_temperature", "temp_load"), Outlier(value=79.0, median=70.5, z=4.1))
    assert hot == "outlier: hottest GPU under load 79.0 C is 12% above the fleet median 70.5 C (robust z +4.1)"
    fs = outliers.reason(metric("fs_throughput", "write_bw"), Outlier(value=3.1e9, median=5.0e9, z=-8.0))
    assert fs == "outlier: write 3.10 GB/s is 38% below the fleet median 5.00 GB/s (robust z -8.0)"


def row(name: str, value: float | None, gpu: int | None = None, **labels: str) -> dict:
    return {"name": name, "value": value, "gpu": gpu, "labels": labels}


def test_it_reads_each_key_metric_from_a_nodes_measurements() -> None:
    burn = [row("gflops", 110_000.0 - gpu * 10, gpu) for gpu in range(8)] + [row("temp_max", 90.0, 0)]
    assert metric("burn_in", "gflops").read(burn) == 109_930.0  # the slowest GPU
    thermal = [
        row("temp_gpu_steady", 40.0, 0, phase="idle"),
        row("temp_gpu_steady", 71.0, 0, phase="load"),
        row("temp_gpu_steady", 74.0, 1, phase="load"),
        row("temp_gpu_max", 88.0, 1, phase="load"),
    ]
    assert metric("dlc_temperature", "temp_load").read(thermal) == 74.0  # hottest GPU, steady load
    assert metric("nccl_allreduce", "busbw").read([row("busbw_peak", 468.5), row("algbw_peak", 250.0)]) == 468.5
    assert metric("nccl_allreduce", "busbw").read([row("busbw_peak", None)]) is None
    fio = [
        row("write_bw", 2e9, job="w1"),
        row("write_bw", 3e9, job="w2"),
        row("write_bw_sum", 5e9),
        row("read_bw", 6e9, job="r"),
    ]
    assert metric("fs_throughput", "write_bw").read(fio) == 5e9  # the node's total, as judged
    assert metric("fs_throughput", "read_bw").read(fio) == 6e9  # no sum: the jobs added up


def test_it_finds_outliers_per_node_from_measurement_rows() -> None:
    per_node = {node: [row("busbw_peak", value)] for node, value in BUSBW.items()}
    per_node["n08"] = [row("busbw_peak", None)]  # no value: not part of the fleet
    found = fleet_outliers(metric("nccl_allreduce", "busbw"), per_node)
    assert list(found) == ["n07"]
