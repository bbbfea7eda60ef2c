"""A result whose output the transport cut while reading is stored as truncated (the run page and the
certificate payload read `CheckResult.output_truncated`)."""

from __future__ import annotations

import pytest

from checks.core.base import Command, CommandOutput, Verdict
from portal.runs import services
from portal.runs.models import CheckResult

pytestmark = pytest.mark.django_db


def _output(*, truncated: bool) -> CommandOutput:
    text = "head\n[... 100 bytes cut by Kiln: output over the 64-byte read cap; head and tail kept ...]\ntail\n"
    command = Command(argv=("dmesg",), timeout=10, label="kernel log")
    return CommandOutput(command, text if truncated else "all\n", "", 0, False, 0.1, truncated=truncated)


@pytest.mark.parametrize("many", [False, True])
def test_it_stores_the_transports_cut_as_output_truncated(cluster, make_run, many: bool) -> None:
    run = make_run(cluster)
    node = cluster.nodes.get(hostname="n01")
    first, second = services.results_claim(run_id=run.pk, node_id=node.pk, claim="t")[:2]
    cut = [_output(truncated=False), _output(truncated=True)] if many else [_output(truncated=True)]
    verdict = Verdict("error", "output truncated")
    assert services.record_from_check(result=first, claim="t", verdict=verdict, measurements=[], outputs=cut)
    whole = [_output(truncated=False)]
    assert services.record_from_check(result=second, claim="t", verdict=verdict, measurements=[], outputs=whole)

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.output_truncated and "bytes cut by Kiln" in first.stdout
    assert not second.output_truncated
    assert CheckResult.objects.filter(run=run, output_truncated=True).count() == 1
