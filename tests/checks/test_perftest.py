"""perftest parser (parser kind `perftest`): every real capture, MB/s conversion, CUDA facts, and the
outputs that must never be read as evidence (cut tables, garbage, NaN, failed runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import PARSERS, parse_output
from checks.rdma.perftest import MIB_PER_S_IN_GBPS, failure_line, parse_perftest, perftest_measurements

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "perftest"
NDR = "ib_write_bw-cx7-ndr400-b2b-dac.txt"
HDR = "ib_write_bw-a-cx6-hdr200-client.txt"
MBPS = "ib_read_bw-a-MBps-mlx4-ib-cpufreq-warning-midtable.txt"
LAT = "ib_write_lat-a-mlx4-ib.txt"
ROCE_LAT = "ib_read_lat-roce-sriov-vf-cpufreq-warnings-spiderpool-complete.txt"
CUDA_CLIENT = "ib_write_bw-a-use_cuda-a100-ib-k8s-client.txt"
CUDA_SERVER = "ib_write_bw-a-use_cuda-a100-ib-k8s-server.txt"
DOCS = "ib_write_bw-a-use_cuda-dmabuf-roce100g-gpu-operator-docs-complete.txt"
DURATION = "ib_write_bw-D60-use_cuda-dmabuf-a40-roce-duration-client.txt"
UD_DURATION = "ib_send_bw-D10-UD-roce-cpufreq-warning-duration-mbps.txt"
CUT = (
    "ib_write_bw-a-use_cuda-dmabuf-roce100g-gpu-operator-docs.txt",
    "ib_read_lat-roce-sriov-vf-cpufreq-warnings-spiderpool.txt",
)


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def measured(name: str) -> list[Measurement]:
    return parse_output("perftest", read(name)).measurements


def one(ms: list[Measurement], name: str, size: int | None = None) -> Measurement:
    found = [m for m in ms if m.name == name and (size is None or m.labels.get("size_bytes") == str(size))]
    assert len(found) == 1, (name, size, found)
    return found[0]


def largest(ms: list[Measurement], name: str) -> Measurement:
    found = [m for m in ms if m.name == name and m.labels.get("largest") == "1"]
    assert len(found) == 1
    return found[0]


def test_it_is_registered_as_a_parser_kind() -> None:
    assert "perftest" in PARSERS


def test_it_reads_the_ndr400_ib_write_bw_at_line_rate() -> None:
    ms = measured(NDR)
    assert one(ms, "bw_peak_gbps", 65536).value == 392.38
    assert one(ms, "bw_avg_gbps", 65536).value == 392.34
    assert one(ms, "msg_rate_mpps", 65536).value == 0.748336
    assert largest(ms, "bw_avg_gbps").labels["size_bytes"] == "65536"
    assert (one(ms, "device").text, one(ms, "link_type").text, one(ms, "perftest_test").text) == (
        "mlx5_0",
        "IB",
        "RDMA_Write BW Test",
    )
    assert one(ms, "mtu_bytes").value == 4096 and one(ms, "qps").value == 1
    assert one(ms, "bw_avg_gbps", 65536).unit == "Gb/s" and "converted_from" not in one(ms, "bw_avg_gbps").labels
    # The CPU frequency warning printed between the header and the row is a warning, not a row.
    assert any("Conflicting CPU frequency" in w for w in parse_output("perftest", read(NDR)).warnings)


def test_it_reads_every_size_of_the_hdr200_sweep() -> None:
    ms = measured(HDR)
    sizes = [int(m.labels["size_bytes"]) for m in ms if m.name == "bw_avg_gbps"]
    assert sizes == [2**i for i in range(1, 24)]
    # The 2-byte row prints six decimals (perftest's inc_accuracy below 0.1 Gb/s), the others two.
    assert one(ms, "bw_peak_gbps", 2).value == 0.086643
    assert largest(ms, "bw_avg_gbps").value == 196.80
    assert largest(ms, "bw_avg_gbps").labels["size_bytes"] == "8388608"


def test_it_converts_mb_per_second_to_gb_per_second_and_says_so() -> None:
    parsed = parse_output("perftest", read(MBPS))
    ms = parsed.measurements
    row = one(ms, "bw_avg_gbps", 8388608)
    # 3666.44 MB/sec, MB = 2^20 bytes (perftest format_factor 0x100000): x 2^20 x 8 / 1e9.
    assert row.value == pytest.approx(3666.44 * 1048576 * 8 / 1e9, abs=1e-3)
    assert row.value == pytest.approx(30.756, abs=1e-3)
    assert row.unit == "Gb/s" and row.labels["converted_from"] == "MB/sec"
    assert MIB_PER_S_IN_GBPS == 0.008388608
    assert "converted_from" not in one(ms, "msg_rate_mpps", 8388608).labels  # Mpps is not converted
    assert any("MB/sec" in w and "converted" in w for w in parsed.warnings)
    # The warning printed inside the table (between the 1 MiB and 2 MiB rows) loses no row.
    assert len([m for m in ms if m.name == "bw_peak_gbps"]) == 23


def test_it_converts_the_newer_mib_header_the_same_way() -> None:
    text = read(MBPS).replace("[MB/sec]", "[MiB/sec]")
    row = one(parse_output("perftest", text).measurements, "bw_avg_gbps", 8388608)
    assert row.labels["converted_from"] == "MiB/sec" and row.value == pytest.approx(30.756, abs=1e-3)


def test_it_reads_latency_percentiles_per_size() -> None:
    ms = measured(LAT)
    assert [one(ms, n, 2).value for n in ("lat_min_us", "lat_typical_us", "lat_avg_us", "lat_max_us")] == [
        0.88,
        0.98,
        1.03,
        6.84,
    ]
    assert one(ms, "lat_p99_us", 2).value == 1.21 and one(ms, "lat_p99_9_us", 2).value == 5.42
    assert one(ms, "lat_typical_us", 2).unit == "us"
    assert largest(ms, "lat_typical_us").value == 2302.01
    assert one(ms, "perftest_test").text == "RDMA_Write Latency Test"


def test_it_reads_the_roce_sriov_latency_past_verbs_and_cpu_warnings() -> None:
    parsed = parse_output("perftest", read(ROCE_LAT))
    ms = parsed.measurements
    assert (one(ms, "device").text, one(ms, "link_type").text) == ("mlx5_5", "Ethernet")
    assert one(ms, "lat_typical_us", 2).value == 6.74 and one(ms, "lat_p99_9_us", 2).value == 20.37
    assert len([w for w in parsed.warnings if "Conflicting CPU" in w]) == 2


def test_it_names_each_warning_it_skips_between_the_column_header_and_the_row() -> None:
    parsed = parse_output("perftest", read(ROCE_LAT))
    skipped = [w for w in parsed.warnings if w.startswith("skipped in the result table")]
    assert len(skipped) == 2 and all("Conflicting CPU frequency values detected: 2200.000000" in w for w in skipped)
    assert len([m for m in parsed.measurements if m.name == "lat_typical_us"]) == 1


@pytest.mark.parametrize(
    "line",
    ["Segmentation fault", "x 1000 6.66 20.37 6.74 6.82 0.78 7.15 20.37", "Conflicting CPU frequency values"],
)
def test_it_refuses_a_line_in_the_table_that_is_neither_a_row_nor_a_known_warning(line: str) -> None:
    text = read(ROCE_LAT)
    row = text.index("         2       1000")
    with pytest.raises(EvidenceError, match="neither a result row nor a known warning"):
        parse_perftest(text[:row] + f"        {line}\n" + text[row:])


def test_a_duration_mode_peak_is_recorded_as_not_measured_never_zero() -> None:
    parsed = parse_output("perftest", read(DURATION))
    ms = parsed.measurements
    peak = one(ms, "bw_peak_gbps", 65536)
    assert peak.value is None and "duration mode" in peak.labels["not_measured"]
    assert one(ms, "bw_avg_gbps", 65536).value == 181.46 and one(ms, "msg_rate_mpps", 65536).value == 0.3461
    assert one(ms, "gpu_buffer").value == 1 and one(ms, "gpu_buffer").labels["gpu_name"] == "NVIDIA A40"
    assert any("BW peak not measured" in w and "not 0" in w for w in parsed.warnings)
    # Without perftest's warning line a 0.00 peak under a 181 Gb/s average is still no peak.
    quiet = read(DURATION).replace(" WARNING: BW peak won't be measured in this run.\n", "")
    assert one(measured_text(quiet), "bw_peak_gbps", 65536).value is None
    # A measured peak is kept: the same output with a real peak printed.
    real = quiet.replace("0.00               181.46", "182.01               181.46")
    assert one(measured_text(real), "bw_peak_gbps", 65536).value == 182.01


def test_a_duration_run_with_a_cpu_warning_before_its_row_reads_both_ways() -> None:
    parsed = parse_output("perftest", read(UD_DURATION))
    ms = parsed.measurements
    assert one(ms, "bw_peak_gbps", 4096).value is None
    avg = one(ms, "bw_avg_gbps", 4096)
    assert avg.value == round(11288.12 * MIB_PER_S_IN_GBPS, 4) and avg.labels["converted_from"] == "MB/sec"
    assert one(ms, "msg_rate_mpps", 4096).value == 2.88976
    assert [w for w in parsed.warnings if w.startswith("skipped")] == [
        "skipped in the result table (a warning, not a row): Conflicting CPU frequency values detected: "
        "800.565000 != 3311.538000. CPU Frequency is not max."
    ]


def measured_text(text: str) -> list[Measurement]:
    return parse_output("perftest", text).measurements


def test_it_sees_the_gpu_buffer_of_a_use_cuda_run_on_both_ends() -> None:
    for name in (CUDA_CLIENT, CUDA_SERVER):
        gpu = one(measured(name), "gpu_buffer")
        assert gpu.value == 1
        assert gpu.labels["gpu_name"] == "NVIDIA A100-SXM4-80GB" and gpu.labels["cuda_device"] == "0"
        assert gpu.labels["memory"] == "gpu"
    # The server prints only its last size; the client the whole sweep.
    assert [m.labels["size_bytes"] for m in measured(CUDA_SERVER) if m.name == "bw_avg_gbps"] == ["8388608"]
    assert largest(measured(CUDA_CLIENT), "bw_avg_gbps").value == 80.96


def test_it_reports_no_gpu_buffer_where_the_output_shows_none() -> None:
    # The GPU operator docs ran --use_cuda=0 --use_cuda_dmabuf but show no CUDA line: no evidence of it.
    for name in (DOCS, NDR):
        assert one(measured(name), "gpu_buffer").value == 0
        assert one(measured(name), "gpu_buffer").labels["memory"] == "host"


def test_it_tells_a_host_allocation_and_dmabuf_apart() -> None:
    body = read(NDR)
    host = "initializing CUDA\nPicking GPU number 3\nHost allocation selected, calling memalign allocator for 1 bytes\n"
    gpu = one(parse_output("perftest", host + body).measurements, "gpu_buffer")
    assert gpu.value == 0 and gpu.labels["memory"].startswith("host") and gpu.labels["cuda_device"] == "3"
    dmabuf = (
        "initializing CUDA\ncuMemAlloc() of a 131072 bytes GPU buffer\n"
        "using DMA-BUF for GPU buffer address at 0x7f aligned at 0x7f with aligned size 131072\n"
    )
    gpu = one(parse_output("perftest", dmabuf + body).measurements, "gpu_buffer")
    assert gpu.value == 1 and gpu.labels["memory"] == "gpu-dmabuf" and gpu.labels["dmabuf"] == "1"
    asked = one(parse_output("perftest", "initializing CUDA\n" + body).measurements, "gpu_buffer")
    assert asked.value == 0 and asked.labels["memory"].startswith("unknown")


@pytest.mark.parametrize("name", CUT)
def test_it_refuses_the_captures_cut_before_the_closing_line(name: str) -> None:
    with pytest.raises(EvidenceError, match="table not closed"):
        parse_perftest(read(name))


@pytest.mark.parametrize("name", [NDR, HDR, MBPS, LAT, UD_DURATION])
def test_it_refuses_a_table_cut_anywhere(name: str) -> None:
    text = read(name)
    closing = text.rstrip().rfind("\n")
    with pytest.raises(EvidenceError):
        parse_perftest(text[:closing])
    for fraction in (0.3, 0.6, 0.9):
        with pytest.raises(EvidenceError):
            parse_perftest(text[: int(len(text) * fraction)])


def test_it_reads_a_closing_line_cut_short_as_a_cut_table() -> None:
    text = read(NDR).rstrip()
    with pytest.raises(EvidenceError, match="not closed"):
        parse_perftest(text[:-40])


@pytest.mark.parametrize("value", ["nan", "-nan", "inf", "-1.00", "abc"])
def test_it_refuses_a_value_that_is_not_a_finite_non_negative_number(value: str) -> None:
    text = read(NDR).replace("392.34", value)
    with pytest.raises(EvidenceError, match="65536 bytes"):
        parse_perftest(text)


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "garbage\n" * 50, "\x00" * 1000, "RDMA_Write BW Test\n", "1 2 3 4 5\n" * 10],
)
def test_it_refuses_garbage(text: str) -> None:
    with pytest.raises(EvidenceError):
        parse_output("perftest", text)


def test_it_refuses_a_row_with_missing_fields_and_latency_in_cycles() -> None:
    with pytest.raises(EvidenceError, match="fields"):
        parse_perftest(read(NDR).replace("392.34 \t\t     0.748336", ""))
    with pytest.raises(EvidenceError, match="usec"):
        parse_perftest(read(LAT).replace("[usec]", "[cycles]"))


def test_it_names_why_perftest_did_not_run() -> None:
    text = "Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor for socket connection\n"
    with pytest.raises(EvidenceError, match="Couldn't connect to 10.0.0.2:18515"):
        parse_perftest(text)
    assert failure_line(text) == "Couldn't connect to 10.0.0.2:18515"
    assert failure_line(read(NDR)) == ""


def test_it_refuses_two_reports_in_one_output() -> None:
    with pytest.raises(EvidenceError, match="more than one"):
        parse_perftest(read(CUDA_SERVER) + read(CUDA_CLIENT))


def test_measurements_come_straight_from_a_parsed_run() -> None:
    run = parse_perftest(read(HDR))
    assert run.kind == "bw" and run.device == "mlx5_0" and run.largest["bytes"] == 8388608
    assert len(perftest_measurements(run)) == len(measured(HDR))


def test_the_cli_prints_the_measurements() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "checks", "parse", "perftest", str(FIXTURES / MBPS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = [m for m in doc["measurements"] if m["name"] == "bw_avg_gbps" and m["labels"].get("largest")]
    assert rows[0]["labels"]["converted_from"] == "MB/sec"
    cut = subprocess.run(
        [sys.executable, "-m", "checks", "parse", "perftest", str(FIXTURES / CUT[0])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cut.returncode == 2 and "not closed" in cut.stderr
