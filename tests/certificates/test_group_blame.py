"""A group result that failed with no node to blame (the heat soak's PDU phase, UPS or loop) keeps
every node it spanned open in a campaign: the certificate cannot say PASS while its power and
cooling section shows a failure."""

from __future__ import annotations

from portal.certificates.selectors import _latest_per_node


def test_it_opens_every_node_of_a_group_failure_nobody_is_blamed_for(monkeypatch) -> None:
    rows = [
        {"id": 1, "scope": "group", "node_set": "n[1-2]", "item_key": "power-soak", "status": "fail",
         "reason": "UPS ups1: capacity 90 kW under 1.2 x peak", "attribution": {
             "n1": {"status": "pass", "reason": "within spec"}, "n2": {"status": "skipped", "reason": "left out"}}},
        {"id": 2, "scope": "group", "node_set": "n[1-2]", "item_key": "nccl", "status": "fail",
         "reason": "slow", "attribution": {"n1": {"status": "fail", "reason": "slow port"},
                                           "n2": {"status": "pass", "reason": "within spec"}}},
    ]  # fmt: skip
    monkeypatch.setattr("portal.certificates.selectors._latest_results", lambda campaign: rows)

    class N:
        def __init__(self, pk: int) -> None:
            self.pk = pk

    latest = _latest_per_node(None, {"n1": N(1), "n2": N(2)})  # type: ignore[arg-type, dict-item]
    assert latest[(1, "power-soak")]["status"] == "fail" and "UPS ups1" in latest[(1, "power-soak")]["reason"]
    assert latest[(2, "power-soak")]["status"] == "fail"
    # A group failure localised to a node stays that node's: the others keep their pass.
    assert latest[(1, "nccl")]["status"] == "fail" and latest[(2, "nccl")]["status"] == "pass"
