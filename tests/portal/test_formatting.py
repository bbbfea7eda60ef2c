"""Numbers for people (portal/formatting.py): units scaled and spelled, thresholds written like the
values they judge, no e-notation, and no made-up number for a missing or invalid value."""

from __future__ import annotations

import math
import re

import pytest
from django.template import Context, Template
from django.urls import reverse

from portal import formatting
from portal.formatting import quantity, threshold
from tests.portal.helpers import add_measurement, set_result

E_NOTATION = re.compile(r"\d[eE][-+]?\d")


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (6e9, "B/s", "6.0 GB/s"),
        (4.25e8, "B/s", "425 MB/s"),
        (512.0, "B/s", "512 B/s"),
        (8.1e13, "B", "81.0 TB"),
        (109400.3, "Gflop/s", "109,400 Gflop/s"),
        (1.094e05, "Gflop/s", "109,400 Gflop/s"),
        (81.5, "C", "81.5 °C"),
        (82.0, "C", "82 °C"),
        (350.0, "W", "350 W"),
        (12345.6, "W", "12.3 kW"),
        (0.0123, "s", "12.3 ms"),
        (4.2e-5, "s", "42.0 µs"),
        (3.5, "us", "3.5 µs"),
        (8.0, "GPUs", "8 GPUs"),
        (1234567.0, "", "1,234,567"),
        (0.00123, "", "0.00123"),
        (0.88, "", "0.88"),
    ],
)
def test_a_value_is_shown_in_the_unit_people_read(value: float, unit: str, shown: str) -> None:
    assert quantity(value, unit) == shown


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0, "B/s", "0 B/s"),
        (0.0, "C", "0 °C"),
        (-3.5, "C", "-3.5 °C"),
        (-2e9, "B/s", "-2.0 GB/s"),
        (math.nan, "Gflop/s", "invalid"),
        (math.inf, "B/s", "invalid"),
        (-math.inf, "", "invalid"),
        ("nan", "W", "invalid"),
        (None, "C", "—"),
        ("", "C", "—"),
        (True, "", "—"),
        ("550.54.15", "", "550.54.15"),
        (1e300, "", "1.00 × 10³⁰⁰"),
        (3e-12, "", "3.00 × 10⁻¹²"),
        (2.5e18, "B/s", "2,500 PB/s"),
    ],
)
def test_edge_cases_never_print_a_fake_number_or_e_notation(value: object, unit: str, shown: str) -> None:
    text = quantity(value, unit)
    assert text == shown
    assert not E_NOTATION.search(text)


@pytest.mark.parametrize(
    ("text", "unit", "shown"),
    [
        (">= 4 GB/s", "B/s", "≥ 4 GB/s"),
        (">= 6e+09", "B/s", "≥ 6.0 GB/s"),
        ("<= 82", "C", "≤ 82 °C"),
        ("== 0", "errors", "= 0 errors"),
        (">= 1e+05", "Gflop/s", "≥ 100,000 Gflop/s"),
        (">= 95% of the median node", "B/s", "≥ 95% of the median node"),
        (">= 27715 W", "W", "≥ 27.7 kW"),
        ("<= 0.1", "", "≤ 0.1"),
        (">= 2 of 3 ports", "", "≥ 2 of 3 ports"),
        ("== Completed", "", "== Completed"),
        ("== 550.54.15 and >= 520.61.05", "", "== 550.54.15 and >= 520.61.05"),  # a version is text
        # Two bounds judged together (burn-in: a floor and the fleet's median less 10%).
        (">= 30000 · >= 44978 (median - 10%)", "Gflop/s", "≥ 30,000 Gflop/s · ≥ 44,978 Gflop/s (median - 10%)"),
        (">= 30000, >= 44978 (median - 10%)", "Gflop/s", "≥ 30,000 Gflop/s · ≥ 44,978 Gflop/s (median - 10%)"),
        ("in a,b", "", "in a,b"),
        ("", "C", "—"),
        (None, "C", "—"),
    ],
)
def test_a_threshold_is_written_like_the_values_it_judges(text: object, unit: str, shown: str) -> None:
    assert threshold(text, unit) == shown


def test_the_value_and_its_floor_read_alike() -> None:
    assert f"{quantity(6e9, 'B/s')} {threshold('>= 4e+09', 'B/s')}" == "6.0 GB/s ≥ 4.0 GB/s"


def test_the_template_filters_use_the_same_layer() -> None:
    html = Template('{% load kiln %}{{ v|quantity:"B/s" }} / {{ t|limit:"B/s" }} / {{ n|quantity:"C" }}').render(
        Context({"v": 6e9, "t": ">= 4 GB/s", "n": None})
    )
    assert html == "6.0 GB/s / ≥ 4 GB/s / —"


@pytest.mark.parametrize(
    ("when", "shown"),
    [
        ("2026-12-03T15:44:27.123456+00:00", "2026-12-03T15:44:27Z"),
        ("2026-12-03T16:44:27+01:00", "2026-12-03T15:44:27Z"),
        (None, "—"),
        ("not a date", "not a date"),
    ],
)
def test_timestamps_are_iso_8601_utc(when: object, shown: str) -> None:
    assert formatting.iso_utc(when) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [(8.0, "8"), (81.25, "81.25"), (1.5e7 + 0.5, "15,000,000"), (1.2e-5, "0.000012"), (math.nan, "invalid")],
)
def test_the_num_filter_never_writes_e_notation(value: float, shown: str) -> None:
    assert Template("{% load kiln %}{{ v|num }}").render(Context({"v": value})) == shown


def test_the_result_page_shows_values_and_floors_alike(client, make_user, cluster, make_run) -> None:
    client.force_login(make_user("vic", "viewer"))
    result = set_result(make_run(cluster), "n01", "ecc-health", "pass", "ok")
    add_measurement(result, "write_bw_sum", value=6e9, unit="B/s", threshold=">= 4 GB/s", ok=True)
    html = client.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    table = html[html.index('id="node-measurements"') :]
    assert "<td>6.0 GB/s</td>" in table and "<td>≥ 4 GB/s</td>" in table and "6e+09" not in table


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("duration_s", 600, "600 s"),
        ("max_bytes", 8589934592, "8 GiB"),
        ("file_bytes", 4_000_000_000, "4 GB"),
        ("block_bytes", 1000, "1 kB"),
        ("odd_bytes", 1234, "1,234 B"),
        ("iterations", 20000, "20,000"),
        ("max_power_w", 700, "700 W"),
        ("max_temp_c", 85, "85 °C"),
        ("min_coverage_pct", 95, "95 %"),
        ("min_busbw_gbps", 460.5, "460.5"),
        ("use_cuda", True, "yes"),
        ("ops", ["write", "read"], "write, read"),
        ("sensor", "GPU", "GPU"),
        ("limit", None, "not set"),
        ("expected_kernel", "", "not set"),
        ("expected_kernel", "  ", "not set"),
        ("xid_ignore_codes", [], "not set"),
        ("bad_s", float("nan"), "invalid"),
    ],
)
def test_plan_settings_are_shown_with_the_unit_their_name_declares(name: str, value: object, shown: str) -> None:
    assert formatting.setting(name, value) == shown


@pytest.mark.parametrize(
    ("name", "declared", "shown"),
    [
        ("ecc_volatile_uncorrected", "", "ECC volatile uncorrected"),
        ("nvlink_speed", "", "NVLink speed"),
        ("write_bw_sum", "", "Write bandwidth sum"),
        ("gpuCount", "", "gpuCount"),  # a name already in mixed case is left as written
        ("busbw_peak", "Bus bandwidth (peak)", "Bus bandwidth (peak)"),
        ("", "", "—"),
    ],
)
def test_a_measurement_reads_by_its_declared_label_else_in_words(name: str, declared: str, shown: str) -> None:
    assert formatting.name_label(name, declared) == shown


def test_a_check_declares_the_labels_of_its_measurements_and_nothing_else() -> None:
    from checks import presentation_of

    dlc = presentation_of("dlc_temperature")
    assert dlc.label_of("coolant_delta_t") == "Coolant ΔT (outlet − inlet)"
    assert dlc.label_of("busbw_peak") == ""  # another kind's measurement: not this kind's to name
    assert presentation_of("no_such_kind").label_of("coolant_delta_t") == ""
