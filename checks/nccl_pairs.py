"""Pairwise localisation of a slow NCCL group: which node do the bad pairs have in common?"""

from __future__ import annotations

from checks.base import ERROR, FAIL, PASS, WARN, GroupVerdict, Verdict

_BAD = (FAIL, ERROR, WARN)


def localise_slow_pairs(pair_verdicts: dict[tuple[str, str], Verdict]) -> GroupVerdict:
    """Name the node(s) behind slow pairs.

    A node is blamed when every pair it is in is bad AND at least one of those pairs is with a node
    that some good pair clears: a slow pair of two otherwise untested nodes cannot say which of the
    two is slow (disjoint pairing), and a fabric where every pair is slow is not one node's fault.
    Bad pairs no blamed node explains are named in the reason."""
    if not pair_verdicts:
        return GroupVerdict(status=ERROR, reason="no node pairs were run")
    bad = [p for p, v in pair_verdicts.items() if v.status in _BAD]
    if not bad:
        return GroupVerdict(status=PASS, reason=f"all {len(pair_verdicts)} node pairs within spec")
    status = _worst(pair_verdicts, bad)
    suspects = _suspects(pair_verdicts, bad)
    if not suspects:
        return GroupVerdict(status=status, reason=_unlocalised_reason(pair_verdicts, bad))
    node_verdicts = {n: _suspect_verdict(pair_verdicts, [p for p in bad if n in p], n) for n in suspects}
    unexplained = [p for p in bad if not any(n in p for n in suspects)]
    reason = f"localised to {', '.join(suspects)}: every pair with it is slow while its peers pass with other nodes"
    if unexplained:
        reason += f"; also slow: {_pairs(unexplained)}"
    return GroupVerdict(status=status, reason=reason, node_verdicts=node_verdicts)


def _worst(pair_verdicts: dict[tuple[str, str], Verdict], pairs: list[tuple[str, str]]) -> str:
    """FAIL if any of the (bad) pairs failed, else the first one's status."""
    return FAIL if any(pair_verdicts[p].status == FAIL for p in pairs) else pair_verdicts[pairs[0]].status


def _suspects(pair_verdicts: dict[tuple[str, str], Verdict], bad: list[tuple[str, str]]) -> list[str]:
    """Nodes whose every pair is bad, with at least one peer that a good pair clears."""
    cleared = {n for p, v in pair_verdicts.items() if v.status == PASS for n in p}  # skipped clears nobody
    nodes = sorted({n for p in pair_verdicts for n in p})
    suspects = []
    for n in nodes:
        pairs = [p for p in pair_verdicts if n in p]
        if all(p in bad for p in pairs) and any(_other(p, n) in cleared for p in pairs):
            suspects.append(n)
    return suspects


def _unlocalised_reason(pair_verdicts: dict[tuple[str, str], Verdict], bad: list[tuple[str, str]]) -> str:
    if len(bad) == len(pair_verdicts):
        return f"all {len(bad)} node pairs are slow or failing: no single node is to blame (fabric-wide?)"
    return (
        f"{len(bad)} of {len(pair_verdicts)} node pairs are slow or failing ({_pairs(bad)}); "
        "no node is common to them that other pairs clear"
    )


def _suspect_verdict(pair_verdicts: dict[tuple[str, str], Verdict], pairs: list[tuple[str, str]], n: str) -> Verdict:
    """The blamed node's verdict: the worst of its (bad) pairs, with its peers and an example."""
    peers = ", ".join(sorted(_other(p, n) for p in pairs))
    example = pair_verdicts[pairs[0]].reason
    reason = f"every pair with {n} is slow or failing (with {peers}); e.g. {_pairs([pairs[0]])}: {example}"
    return Verdict(status=_worst(pair_verdicts, pairs), reason=reason)


def _other(pair: tuple[str, str], node: str) -> str:
    return pair[1] if pair[0] == node else pair[0]


def _pairs(pairs: list[tuple[str, str]], limit: int = 6) -> str:
    shown = ", ".join(f"{a}+{b}" for a, b in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")
