"""A certificate cites each result's output by the SHA-256 of the exact bytes the node printed: the
digest `sha256sum` gives for the result page's raw download. A result recorded before Kiln kept
raw bytes is cited by the digest of its stored text, as before."""

from __future__ import annotations

import hashlib

import pytest
from django.urls import reverse

from checks.core.base import Command, CommandOutput, Verdict
from portal.certificates import export
from portal.certificates.payload import body_build
from portal.certificates.selectors import campaign_state
from portal.runs import services as run_services
from portal.runs.models import CheckResult

pytestmark = pytest.mark.django_db

RAW = b"<nvidia_smi_log>\x00\xff junk " + b"x" * 400_000 + b"\n"


def test_it_cites_the_digest_of_the_raw_bytes_and_of_legacy_text(
    settings, campaign, campaign_run, client, users
) -> None:
    settings.KILN_OUTPUT_CAP = 1000  # the display copy is cut; the cited bytes are not
    run = campaign_run()
    result = CheckResult.objects.get(run=run, node__hostname="n01", item_key="ecc-health")
    CheckResult.objects.filter(pk=result.pk).update(status="running", claimed_by="t")
    command = Command(argv=("nvidia-smi",), timeout=5)
    output = CommandOutput(command, RAW.decode(errors="replace"), "", 0, stdout_bytes=RAW, stderr_bytes=b"")
    assert run_services.record_from_check(
        result=result, claim="t", verdict=Verdict("pass", "ok"), measurements=[], outputs=[output]
    )

    body = body_build(state=campaign_state(campaign=campaign))

    records = {r["node"]: {x["item_key"]: x for x in r["results"]} for r in export.node_records(body["nodes"])}
    n01 = {"checks": records["n01"]}
    client.force_login(users["viewer"])
    download = client.get(reverse("runs:result_raw_output", args=[result.pk, "stdout"]))
    assert (
        n01["checks"]["ecc-health"]["stdout_sha256"] == hashlib.sha256(b"".join(download.streaming_content)).hexdigest()
    )
    assert n01["checks"]["ecc-health"]["stdout_sha256"] == hashlib.sha256(RAW).hexdigest()
    assert n01["checks"]["ecc-health"]["stderr_sha256"] == hashlib.sha256(b"").hexdigest()
    # A result with text only (set directly, as before raw bytes were kept): its text's digest.
    legacy = CheckResult.objects.get(run=run, node__hostname="n02", item_key="ecc-health")
    assert not legacy.stdout_sha256
    n02 = {"checks": records["n02"]}
    assert n02["checks"]["ecc-health"]["stdout_sha256"] == hashlib.sha256(legacy.stdout.encode()).hexdigest()
