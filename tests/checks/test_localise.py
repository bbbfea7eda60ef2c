"""Localisation by halves (checks/core/localise.py): which sub-runs come next, and what they say.

The search is driven here against a model of the cluster (a set of slow nodes, racks, nodes that
cannot run): every round is checked to be disjoint and within the capacity, and the verdict to
name exactly the slow nodes, pass the others, and never pass what it could not clear."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest

from checks.core.localise import (
    BLIND_LIMIT,
    Bisection,
    budget_rounds,
    conclude,
    halves,
    plan,
    record,
    simulate,
    start,
)
from checks.core.verdict import ERROR, FAIL, PASS, GroupVerdict, Verdict

StatusOf = Callable[[tuple[str, ...]], str]


def hosts(n: int) -> list[str]:
    return [f"gpu{i:02d}" if n < 100 else f"gpu{i:05d}" for i in range(1, n + 1)]


def slow(*bad: str) -> StatusOf:
    return lambda nodes: FAIL if set(bad) & set(nodes) else PASS


def drive(
    nodes: Sequence[str],
    status_of: StatusOf,
    *,
    capacity: int = 8,
    racks: dict[str, str] | None = None,
    max_rounds: int | None = None,
) -> Bisection:
    """The search to its end (or `max_rounds`), checking every round it plans."""
    state = start(nodes, Verdict(status_of(tuple(nodes)), "the whole group"), racks)
    while max_rounds is None or state.rounds < max_rounds:
        runs = plan(state, capacity=capacity)
        if not runs:
            break
        assert len(runs) <= capacity
        members = [n for r in runs for n in r.nodes]
        assert len(members) == len(set(members)), f"a node in two sub-runs of one round: {runs}"
        assert all(len(r.nodes) >= 2 for r in runs), "a collective needs two nodes"
        record(state, [(r, Verdict(status_of(r.nodes), f"{status_of(r.nodes)} on {','.join(r.nodes)}")) for r in runs])
        assert state.rounds <= 4 * len(nodes) + 8, "the search does not end"
    return state


def named(verdict: GroupVerdict) -> set[str]:
    return {h for h, v in verdict.node_verdicts.items() if v.status != PASS}


def assert_names_exactly(state: Bisection, bad: set[str], status: str = FAIL) -> GroupVerdict:
    verdict = conclude(state)
    assert named(verdict) == bad, verdict.reason
    assert all(verdict.node_verdicts[h].status == status for h in bad)
    assert set(verdict.node_verdicts) == set(state.group), "every node has a verdict"
    for node in bad:
        assert "known-good partner" in verdict.node_verdicts[node].reason
    assert verdict.status == status
    return verdict


# --- one slow node --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9, 12, 16, 31, 32, 33, 64, 100, 1250])
def test_it_names_one_slow_node_anywhere_in_log_rounds(n: int) -> None:
    nodes = hosts(n)
    bound = max(3, math.ceil(math.log2(n)))
    positions = range(n) if n <= 64 else range(0, n, 97)
    for position in positions:
        state = drive(nodes, slow(nodes[position]))
        assert_names_exactly(state, {nodes[position]})
        assert state.rounds <= bound, (n, position, state.rounds)


def test_it_names_one_slow_node_among_32_in_three_rounds_of_parallel_sub_runs() -> None:
    nodes = hosts(32)
    state = drive(nodes, slow("gpu23"))
    assert_names_exactly(state, {"gpu23"})
    by_round = [[r.nodes for r in state.runs if r.round == k] for k in range(1, state.rounds + 1)]
    assert [len(runs) for runs in by_round] == [2, 2, 8], "16|16, 8|8, then every suspect with a cleared partner"
    assert by_round[0] == [tuple(nodes[:16]), tuple(nodes[16:])]


def test_it_verifies_a_named_node_with_a_partner_that_passed() -> None:
    state = drive(hosts(12), slow("gpu07"))
    verdict = assert_names_exactly(state, {"gpu07"})
    [pair] = [r for r in state.runs if "gpu07" in r.nodes and len(r.nodes) == 2]
    partner = pair.partner
    assert partner and partner != "gpu07" and partner in state.cleared
    assert any(r.verdict.status == PASS and partner in r.nodes for r in state.runs)
    assert f"partner, {partner} (within spec in round" in verdict.node_verdicts["gpu07"].reason
    assert verdict.reason.startswith("localised to gpu07 by halves (")


def test_a_slow_node_with_two_nodes_cannot_be_told_apart() -> None:
    state = drive(["gpu01", "gpu02"], slow("gpu02"))
    verdict = conclude(state)
    assert state.runs == []
    assert verdict.status == ERROR and verdict.node_verdicts == {}
    assert verdict.reason == (
        "no sub-run was run: 2 node(s) cannot be split and paired with a known-good node; nothing localised"
    )


@pytest.mark.parametrize("bad", ["gpu01", "gpu02", "gpu03"])
def test_it_names_a_slow_node_among_three(bad: str) -> None:
    state = drive(hosts(3), slow(bad))
    assert_names_exactly(state, {bad})
    assert state.rounds <= 3, "no worse than the three pairs of a ring"


# --- several slow nodes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"gpu01", "gpu32"},  # one in each half: both halves are followed
        {"gpu05", "gpu06"},  # side by side
        {"gpu09", "gpu10", "gpu11"},
        {"gpu02", "gpu15", "gpu17", "gpu30"},
    ],
)
def test_it_follows_both_halves_when_both_are_slow(bad: set[str]) -> None:
    state = drive(hosts(32), slow(*bad))
    assert_names_exactly(state, bad)
    assert state.rounds <= 6


def test_it_names_two_slow_nodes_among_four() -> None:
    state = drive(hosts(4), slow("gpu01", "gpu04"))
    assert_names_exactly(state, {"gpu01", "gpu04"})


def test_it_clears_a_node_sitting_between_two_slow_nodes() -> None:
    state = drive(hosts(12), slow("gpu01", "gpu03"))
    verdict = assert_names_exactly(state, {"gpu01", "gpu03"})
    assert verdict.node_verdicts["gpu02"].status == PASS


@pytest.mark.parametrize("n", [3, 4, 12, 32])
def test_it_blames_no_single_node_when_every_sub_run_is_slow(n: int) -> None:
    state = drive(hosts(n), lambda nodes: FAIL)
    verdict = conclude(state)
    assert verdict.status == FAIL and verdict.node_verdicts == {}
    assert "no single node is to blame" in verdict.reason
    assert sum(r.bad for r in state.runs) <= BLIND_LIMIT + 8, "it stops soon after the limit"


def test_it_never_blames_a_good_node_when_most_are_slow() -> None:
    # gpu04 is fine, but every run with it holds a slow node: nobody can vouch for anybody.
    state = drive(hosts(4), slow("gpu01", "gpu02", "gpu03"))
    verdict = conclude(state)
    assert verdict.node_verdicts == {}
    assert verdict.status == FAIL and "not localised" in verdict.reason


# --- odd sizes, racks -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 7, 33])
def test_halves_of_an_odd_set_differ_by_one_node(n: int) -> None:
    first, second = halves(hosts(n), {})
    assert first + second == tuple(hosts(n))
    assert len(first) - len(second) == n % 2


def test_it_splits_by_rack_first_then_by_node() -> None:
    nodes = hosts(32)
    racks = {h: f"rack{i // 8 + 1}" for i, h in enumerate(nodes)}
    assert halves(nodes, racks) == (tuple(nodes[:16]), tuple(nodes[16:]))
    state = drive(nodes, slow("gpu11"), racks=racks)
    assert_names_exactly(state, {"gpu11"})
    first = [r.nodes for r in state.runs if r.round == 1]
    second = [r.nodes for r in state.runs if r.round == 2]
    assert [{racks[h] for h in run} for run in first] == [{"rack1", "rack2"}, {"rack3", "rack4"}]
    assert [{racks[h] for h in run} for run in second] == [{"rack1"}, {"rack2"}]


def test_it_keeps_racks_whole_when_their_sizes_differ() -> None:
    nodes = hosts(10)
    racks = {h: ("rack10" if i < 3 else "rack9") for i, h in enumerate(nodes)}  # 3 in rack10, 7 in rack9
    first, second = halves(nodes, racks)
    assert set(first) == set(nodes[3:]), "rack9 sorts before rack10 and is cut whole"
    assert set(second) == set(nodes[:3])


def test_a_node_without_a_rack_is_cut_apart_from_the_racked_ones() -> None:
    nodes = hosts(6)
    racks = {h: "r1" for h in nodes[:4]}
    assert halves(nodes, racks) == (tuple(nodes[4:]), tuple(nodes[:4]))


def test_a_rack_slow_only_as_a_whole_is_named_in_the_reason_not_its_nodes() -> None:
    nodes = hosts(32)
    racks = {h: f"rack{i // 8 + 1}" for i, h in enumerate(nodes)}
    rack2 = set(nodes[8:16])
    state = drive(nodes, lambda run: FAIL if rack2 <= set(run) else PASS, racks=racks)
    verdict = conclude(state)
    assert named(verdict) == set()
    assert "slow only together: gpu[09-16] (each part passes on its own" in verdict.reason
    assert verdict.status == FAIL


def test_halves_that_both_pass_leave_the_whole_group_unexplained() -> None:
    state = drive(hosts(8), lambda run: FAIL if len(run) == 8 else PASS)
    verdict = conclude(state)
    assert state.rounds == 1
    assert verdict.status == PASS, "no sub-run failed; the group's own fail stands beside it"
    assert all(v.status == PASS for v in verdict.node_verdicts.values())
    assert "slow only together: gpu[01-08]" in verdict.reason


# --- errors, time, refusals -----------------------------------------------------------------------


def test_an_unreachable_node_is_named_error_never_pass() -> None:
    def status_of(run: tuple[str, ...]) -> str:
        return ERROR if "gpu06" in run else FAIL if "gpu13" in run else PASS

    state = drive(hosts(16), status_of)
    verdict = conclude(state)
    assert verdict.node_verdicts["gpu06"].status == ERROR
    assert verdict.node_verdicts["gpu06"].reason.startswith("could not run with a known-good partner")
    assert verdict.node_verdicts["gpu13"].status == FAIL
    assert named(verdict) == {"gpu06", "gpu13"}
    assert verdict.status == FAIL  # gpu13's proven fault outranks gpu06's "could not tell"


def test_a_search_cut_short_says_what_was_not_localised() -> None:
    nodes = hosts(32)
    state = drive(nodes, slow("gpu23"), max_rounds=2)
    verdict = conclude(state, cut_short=True)
    assert named(verdict) == set(nodes[16:24]), "the suspects left are not passed"
    for node in nodes[16:24]:
        assert verdict.node_verdicts[node].status == ERROR
        assert verdict.node_verdicts[node].reason.startswith("not localised: localisation cut short")
    assert verdict.node_verdicts["gpu01"].status == PASS
    assert (
        "not localised: gpu[17-24] (8 node(s)): localisation cut short by the task's time budget after 2 round(s)"
        in (verdict.reason)
    )
    assert verdict.status == FAIL


def test_a_search_cut_short_before_its_first_round_is_an_error() -> None:
    state = start(hosts(8), Verdict(FAIL, "slow"))
    verdict = conclude(state, cut_short=True)
    assert verdict.status == ERROR and verdict.node_verdicts == {}
    assert "cut short by the task's time budget before its first sub-run" in verdict.reason


def test_a_group_that_passed_has_nothing_to_localise() -> None:
    state = start(hosts(8), Verdict(PASS, "ok"))
    assert plan(state, capacity=8) == []
    assert conclude(state).status == PASS


def test_sub_runs_that_did_not_run_are_planned_again() -> None:
    nodes = hosts(16)
    status_of = slow("gpu12")
    state = start(nodes, Verdict(FAIL, "slow"))
    dropped = 0
    while runs := plan(state, capacity=8):
        kept = runs[1:] if len(runs) > 1 and dropped < 3 else runs  # the launcher refused the first
        dropped += len(runs) - len(kept)
        record(state, [(r, Verdict(status_of(r.nodes), "")) for r in kept])
    assert dropped == 3
    assert_names_exactly(state, {"gpu12"})


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_it_still_names_the_nodes_one_sub_run_at_a_time(capacity: int) -> None:
    state = drive(hosts(12), slow("gpu04", "gpu09"), capacity=capacity)
    assert_names_exactly(state, {"gpu04", "gpu09"})


# --- budget ---------------------------------------------------------------------------------------


def test_the_budget_covers_one_slow_node_anywhere_and_grows_with_log_n() -> None:
    assert budget_rounds(2, capacity=8) == 0
    for n in (3, 12, 32, 64, 1250):
        nodes = hosts(n)
        worst = max(drive(nodes, slow(nodes[p])).rounds for p in range(0, n, max(1, n // 40)))
        assert worst <= budget_rounds(n, capacity=8), n
    assert budget_rounds(1250, capacity=8) <= 14, "the ring of 1,250 nodes took 158 rounds and as many again"
    assert budget_rounds(12500, capacity=8) <= budget_rounds(1250, capacity=8) + 5


def test_simulate_matches_the_driven_search() -> None:
    nodes = hosts(64)
    modelled = simulate(nodes, lambda run: "gpu40" in run, capacity=8)
    driven = drive(nodes, slow("gpu40"))
    assert [(r.round, r.nodes) for r in modelled.runs] == [(r.round, r.nodes) for r in driven.runs]
