"""Raw output is stored exactly whatever bytes it holds (NUL, invalid UTF-8, binary), with its
SHA-256; the display copy escapes what text cannot hold and stays capped; the result page shows the
escaped text and offers the bytes for download; the readers of results keep working."""

from __future__ import annotations

import hashlib
import json
import random
import zlib

import pytest
from django.urls import reverse

from checks.core.base import Command, CommandOutput, Series, Verdict
from checks.core.base import Measurement as CheckMeasurement
from portal.runs import rawoutput, selectors, services
from portal.runs.models import CheckResult, Measurement
from portal.runs.models import Series as SeriesRow

pytestmark = pytest.mark.django_db

NASTY = {
    "nul": b'<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>5\x00\x07junk\n',
    "invalid utf-8": b"temp \xff\xfe C\n\xc3\x28 \xe2\x82 cut\n",
    "encoded surrogate": b"a \xed\xa0\x80 b\n",
    "binary": bytes(range(256)) * 4,
}


def output(stdout: bytes, stderr: bytes = b"", *, argv: tuple[str, ...] = ("nvidia-smi",)) -> CommandOutput:
    """What a transport hands over: the bytes, and their decoding with U+FFFD."""
    return CommandOutput(
        Command(argv=argv, timeout=10),
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace"),
        0,
        stdout_bytes=stdout,
        stderr_bytes=stderr,
    )


def claimed(cluster, make_run, hostname: str = "n01") -> list[CheckResult]:
    run = make_run(cluster)
    return services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname=hostname).pk, claim="t")


def stored(result: CheckResult, stream: str = "stdout") -> bytes | None:
    return rawoutput.raw_bytes(selectors.result_raw_output(result_id=result.pk, stream=stream).compressed)


@pytest.mark.parametrize("kind", sorted(NASTY))
def test_it_stores_any_bytes_exactly_with_their_digest(cluster, make_run, kind: str) -> None:
    data = NASTY[kind]
    result = claimed(cluster, make_run)[0]
    verdict = Verdict("error", "not nvidia-smi XML")

    assert services.record_from_check(
        result=result, claim="t", verdict=verdict, measurements=[], outputs=[output(data, b"warn\x00ing\n")]
    )

    result.refresh_from_db()
    assert (result.status, result.reason) == ("error", "not nvidia-smi XML")
    assert stored(result) == data
    assert stored(result, "stderr") == b"warn\x00ing\n"
    assert result.stdout_sha256 == hashlib.sha256(data).hexdigest()
    assert result.stderr_sha256 == hashlib.sha256(b"warn\x00ing\n").hexdigest()
    assert "\x00" not in result.stdout and result.stderr == "warn\\x00ing\n"


def test_it_escapes_nul_and_undecodable_bytes_in_the_display_copy() -> None:
    data = b"a\x00b\xffc \xe2\x82\xac \xed\xa0\x80 \xe2\x82\n"
    packed = rawoutput.pack([data], cap=1000)
    assert packed.display == "a\\x00b\\xffc \u20ac \\xed\\xa0\\x80 \\xe2\\x82\n"
    assert not packed.display_cut
    assert (packed.size, zlib.decompress(packed.compressed)) == (17, data)


def _bytes_shown(display: str, raw: bytes, *, from_end: bool) -> int:
    """How many bytes of `raw` (from its start or its end) the display part stands for."""
    for n in range(len(raw) + 1):
        part = raw[len(raw) - n :] if from_end else raw[:n]
        if rawoutput._escape(part.decode("utf-8", "surrogateescape")) == display:
            return n
    raise AssertionError(f"{display!r} is no escaped {'end' if from_end else 'start'} of the output")


def test_it_caps_the_display_in_characters_and_counts_the_bytes_it_leaves_out() -> None:
    rng = random.Random(7)
    alphabet = [b"a", b"\n", b"\x00", b"\xff", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xc3", b"\xa9"]
    for _ in range(300):
        raw = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
        cap = rng.randrange(4, 60)
        parts = [raw[i : i + 7] for i in range(0, len(raw), 7)]  # the parts are never joined whole
        packed = rawoutput.pack(parts, cap=cap)
        assert zlib.decompress(packed.compressed) == raw and packed.size == len(raw)
        if not packed.display_cut:
            assert packed.display == rawoutput._escape(raw.decode("utf-8", "surrogateescape"))
            assert len(packed.display) <= cap
            continue
        head, marker, tail = packed.display.partition("\n[... ")
        cut = int(marker and tail.split(" ", 1)[0])
        tail = tail.split("download keeps them ...]\n", 1)[1]
        assert len(head) <= cap * 3 // 4 and len(tail) <= cap - cap * 3 // 4
        shown = _bytes_shown(head, raw, from_end=False) + _bytes_shown(tail, raw, from_end=True)
        assert shown + cut == len(raw), (raw, cap, packed.display)


def test_it_keeps_one_section_per_command_in_the_raw_output(cluster, make_run) -> None:
    result = claimed(cluster, make_run)[0]
    outputs = [output(b"one\x00\n", argv=("a",)), output(b"\xfftwo", b"oops\n", argv=("b", "x y"))]

    services.record_from_check(
        result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=[], outputs=outputs
    )

    result.refresh_from_db()
    assert stored(result) == b"### a\none\x00\n\n### b 'x y'\n\xfftwo\n"
    assert stored(result, "stderr") == b"### b 'x y'\noops\n\n"
    assert result.stdout == "### a\none\\x00\n\n### b 'x y'\n\\xfftwo\n"
    assert result.command == "a\nb 'x y'"


def test_it_stores_text_only_outputs_as_utf8(cluster, make_run) -> None:
    result = claimed(cluster, make_run)[0]
    text_only = CommandOutput(Command(argv=("probe",), timeout=5), "GPU 0 ✓\n", "", 0)

    services.record_from_check(
        result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=[], outputs=[text_only]
    )

    result.refresh_from_db()
    assert stored(result) == "GPU 0 ✓\n".encode() and result.stdout == "GPU 0 ✓\n"
    assert result.stdout_sha256 == hashlib.sha256("GPU 0 ✓\n".encode()).hexdigest()


def test_it_stores_reasons_measurements_and_series_made_from_nul_output(cluster, make_run) -> None:
    """A parser may quote what it read: the reason, a measurement's text or labels, a series' name."""
    result = claimed(cluster, make_run)[0]
    measurement = CheckMeasurement(name="driver\x00", text="5\x00\x07", labels={"line": "a\x00b", "k\x00": ["\ud800"]})
    series = Series(name="temp\x00", unit="C", x=[0.0, 1.0], y=[30.0, 31.0], labels={"phase": "lo\x00ad"})

    assert services.result_record(
        result=result,
        claim="t",
        verdict=Verdict("error", "unexpected line '5\x00\x07' \udc80"),
        measurements=[measurement],
        series=[series],
        attribution={"n01": {"status": "error", "reason": "bad \x00"}},
    )

    result.refresh_from_db()
    assert result.reason == "unexpected line '5\\x00\x07' \\udc80"
    assert result.attribution == {"n01": {"status": "error", "reason": "bad \\x00"}}
    row = Measurement.objects.get(result=result)
    assert (row.name, row.text, row.labels) == ("driver\\x00", "5\\x00\x07", {"line": "a\\x00b", "k\\x00": ["\\ud800"]})
    curve = SeriesRow.objects.get(result=result)
    assert (curve.name, curve.labels) == ("temp\\x00", {"phase": "lo\\x00ad"})


@pytest.fixture
def nul_result(cluster, make_run) -> CheckResult:
    result = claimed(cluster, make_run)[0]
    outputs = [output(NASTY["nul"] + b"<b>&amp;</b>\n", b"\xff\n")]
    services.record_from_check(
        result=result, claim="t", verdict=Verdict("error", "not nvidia-smi XML"), measurements=[], outputs=outputs
    )
    return CheckResult.objects.get(pk=result.pk)


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def test_it_downloads_the_exact_bytes_for_a_viewer(viewer_client, nul_result) -> None:
    response = viewer_client.get(reverse("runs:result_raw_output", args=[nul_result.pk, "stdout"]))

    assert response.status_code == 200 and response.streaming
    body = b"".join(response.streaming_content)
    assert body == NASTY["nul"] + b"<b>&amp;</b>\n"
    assert response["Content-Type"] == "application/octet-stream"  # never rendered by the browser
    assert response["Content-Disposition"] == f'attachment; filename="kiln-result-{nul_result.pk}.stdout"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Kiln-SHA256"] == hashlib.sha256(body).hexdigest() == nul_result.stdout_sha256
    stderr = viewer_client.get(reverse("runs:result_raw_output", args=[nul_result.pk, "stderr"]))
    assert b"".join(stderr.streaming_content) == b"\xff\n"


def test_it_inflates_a_large_download_a_chunk_at_a_time() -> None:
    data = bytes(random.Random(3).randrange(256) for _ in range(300_000)) + b"\x00" * 5_000_000
    chunks = list(rawoutput.unpack(zlib.compress(data), chunk=65536))
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= 65536


def test_it_answers_404_without_stored_bytes_or_for_another_stream(viewer_client, cluster, make_run) -> None:
    queued = CheckResult.objects.filter(run=make_run(cluster)).first()
    assert viewer_client.get(reverse("runs:result_raw_output", args=[queued.pk, "stdout"])).status_code == 404
    assert viewer_client.get(f"/results/{queued.pk}/raw/environ/").status_code == 404
    assert viewer_client.get(reverse("runs:result_raw_output", args=[999_999, "stdout"])).status_code == 404


def test_it_refuses_the_download_without_a_role(client, make_user, nul_result) -> None:
    url = reverse("runs:result_raw_output", args=[nul_result.pk, "stdout"])
    assert client.get(url).status_code == 302  # anonymous: to the login page
    client.force_login(make_user("nobody"))
    assert client.get(url).status_code == 403


def test_the_result_page_shows_the_escaped_text_and_links_the_bytes(viewer_client, nul_result) -> None:
    page = viewer_client.get(reverse("runs:result_detail", args=[nul_result.pk])).content.decode()

    assert "&lt;driver_version&gt;5\\x00\x07junk" in page
    assert "&lt;b&gt;&amp;amp;&lt;/b&gt;" in page  # escaped as HTML too: output never becomes markup
    assert reverse("runs:result_raw_output", args=[nul_result.pk, "stdout"]) in page
    assert reverse("runs:result_raw_output", args=[nul_result.pk, "stderr"]) in page
    assert nul_result.stdout_sha256 in page and "\x00" not in page


def test_the_readers_of_results_keep_working_with_nul_output(viewer_client, nul_result) -> None:
    run = nul_result.run
    doc = selectors.run_json(run=run)  # kiln_run --json
    row = next(r for r in doc["results"] if r["check"] == nul_result.item_key and r["node"] == "n01")
    assert row["status"] == "error" and json.dumps(doc)
    exported = viewer_client.get(reverse("history:run_results_json", args=[run.pk]))
    results = json.loads(b"".join(exported.streaming_content))["results"]
    assert any(r["result_id"] == nul_result.pk and r["status"] == "error" for r in results)
    csv_text = b"".join(viewer_client.get(reverse("history:run_results_csv", args=[run.pk])).streaming_content).decode()
    assert f"/results/{nul_result.pk}/" in csv_text
    assert viewer_client.get(reverse("runs:run_detail", args=[run.pk])).status_code == 200


def test_it_does_not_load_raw_bytes_with_a_result_unless_asked(nul_result) -> None:
    loaded = CheckResult.objects.get(pk=nul_result.pk)
    assert {"stdout_raw", "stderr_raw"} <= loaded.get_deferred_fields()
    assert rawoutput.raw_bytes(loaded.stdout_raw) == NASTY["nul"] + b"<b>&amp;</b>\n"  # loaded on access
