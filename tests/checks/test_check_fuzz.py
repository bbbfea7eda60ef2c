"""Every check kind in checks.REGISTRY on hostile inputs: never `pass`, never a crash.

Seeds are real outputs: each check's own commands, with the params its class declares for the
simulator (`simulator_params`), run once on a healthy simulated node (testbed
simulators, the real probe on the fake NVML), where every check passes on the H100 profile; the
DCGM check, whose tool has no simulator, starts from its real captured output
(tests/fixtures/dcgmi). Each seed is then made hostile, deterministically:

- empty output, binary garbage, deeply nested JSON;
- the real output truncated (10%, 50%, 90%, less its last line);
- NaN, inf, -inf, huge and negative numbers written over numbers of the real output.

`run_check` must return a verdict (an exception here is a crash), and the verdict must not be
`pass` whenever the mutation reached what the seed's verdict rests on: a judged measurement (one
compared with a threshold) changed or gone, or any value no longer finite. A number that never
reaches the judged evidence (fio's CPU usage, a PID, an unjudged BMC sensor) may keep its pass.
Numbers equal to a judged value are overwritten first; each check must have mutations that reach
its judged evidence, so the test cannot pass vacuously.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from checks import REGISTRY
from checks.core.base import (
    PASS,
    Check,
    CommandOutput,
    GroupCheck,
    GroupContext,
    Measurement,
    NodeContext,
    Verdict,
    run_check,
    run_group_check,
)
from checks.core.fanout import FanOutCheck
from checks.core.profiles import resolve_params, resolve_thresholds
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

PROFILE = "H100-SXM-8"
HOSTS = ("gpu01", "gpu02")
DCGMI = Path(__file__).resolve().parents[1] / "fixtures" / "dcgmi" / "dcgmi_diag_r4_text_allpass_gcm.txt"
TEXT_BAD = ("nan", "inf", "-inf", "1e308", "-1e308", "-1")
JSON_BAD = ("NaN", "Infinity", "-Infinity", "1e999", "-1e308", "-1")
NUMBER = re.compile(r"(?<![\w.+-])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
SUBSTITUTIONS_PER_OUTPUT = 30


@dataclass
class Seed:
    check: Check
    params: Any
    thresholds: Any
    outputs: list[CommandOutput]
    node: NodeContext
    group: GroupContext | None

    def judge(self, outputs: list[CommandOutput]) -> tuple[list[Measurement], Verdict]:
        if self.group is not None:
            return run_group_check(self.check, self.params, self.thresholds, outputs, self.group)
        return run_check(self.check, self.params, self.thresholds, outputs, self.node)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Seed]:
    root = tmp_path_factory.mktemp("fuzz")
    sim: SimPaths = build_simulator(root / "sim")
    for host in HOSTS:
        write_state(root / "states" / host / "state", node=host)
    (root / "fs").mkdir()
    env = node_env(sim, root / "states" / HOSTS[0] / "state")
    transport = LocalTransport(NodeTarget(hostname=HOSTS[0], transport="local", local_env=env))
    nodes = tuple(NodeContext(hostname=h, expected_gpus=8) for h in HOSTS)
    out: dict[str, Seed] = {}
    for key, cls in sorted(REGISTRY.items()):
        if issubclass(cls, FanOutCheck):
            continue  # every node at once for minutes: fuzzed in tests/checks/test_power_soak_check.py
        check = cls()
        overrides = dict(cls.simulator_params)  # seconds, not hours: the class declares them
        if key.startswith("fs_"):
            overrides["path"] = str(root / "fs")
        params = check.make_params(resolve_params(key, PROFILE, overrides))
        thresholds = check.make_thresholds(resolve_thresholds(key, PROFILE))
        group = None
        if isinstance(check, GroupCheck):
            # The tag names files on the launcher (/tmp/kiln-mdtest-TAG.hostfile): one per process,
            # or two xdist workers building this fixture at once remove each other's.
            group = GroupContext(nodes=nodes, launcher=nodes[0], tag=f"fuzz-{key}-{os.getpid()}")
            commands = check.group_commands(params, group)
        else:
            commands = check.commands(params, nodes[0])
        if key == "dcgm_diag":  # no dcgmi simulator: its real captured output
            outputs = [CommandOutput(commands[0], DCGMI.read_text(), "", 0)]
        else:
            outputs = [transport.run(c) for c in commands]
        out[key] = Seed(check, params, thresholds, outputs, nodes[0], group)
    # The same all-to-all as an nccl-tests before 2.13 prints it (checks/nccl/nccl_tests.py): no root,
    # a blank redop, and the `error` column the largest deviation as a float.
    alltoall = out["nccl_alltoall_multi"]
    old = [replace(o, stdout=pre_2_13(o.stdout)) if o.stdout else o for o in alltoall.outputs]
    out[OLD_ALLTOALL] = replace(alltoall, outputs=old)
    return out


OLD_ALLTOALL = "nccl_alltoall_multi/pre-2.13"


def pre_2_13(text: str) -> str:
    lines = []
    for line in text.splitlines():
        tokens = line.split()
        if line.startswith("#") and "size" in tokens and "#wrong" in tokens:
            line = line.replace("    root", "").replace("#wrong", " error")
        elif len(tokens) == 13 and tokens[0].isdigit() and tokens[3:5] == ["none", "-1"]:
            row = tokens[:3] + [""] + tokens[5:]
            row[7] = "0e+00" if row[7] == "0" else row[7]
            row[11] = "0e+00" if row[11] == "0" else row[11]
            line = "  " + "  ".join(row)
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_it_seeds_every_registered_check_with_a_passing_real_output(seeds: dict[str, Seed]) -> None:
    assert set(seeds) == {k for k, c in REGISTRY.items() if not issubclass(c, FanOutCheck)} | {OLD_ALLTOALL}
    old = "\n".join(o.stdout for o in seeds[OLD_ALLTOALL].outputs)
    assert " error " in old and "0e+00" in old and "#wrong" not in old
    for key, seed in seeds.items():
        _, verdict = seed.judge(seed.outputs)
        assert verdict.status == PASS, (key, verdict.reason)


# --- hostile inputs -------------------------------------------------------------------------------


def _with_stdout(outputs: list[CommandOutput], index: int, stdout: str) -> list[CommandOutput]:
    return [replace(o, stdout=stdout) if i == index else o for i, o in enumerate(outputs)]


def _garbage(seed_value: int, size: int = 4096) -> str:
    rng = random.Random(seed_value)
    return bytes(rng.randrange(256) for _ in range(size)).decode("latin-1")


def _is_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))


def _targets(text: str, judged: set[float]) -> list[re.Match[str]]:
    """Numbers to overwrite: first those whose value is a judged measurement's (they carry the
    evidence: a busbw, a temperature, a count), then others spread over the output."""
    numbers = list(NUMBER.finditer(text))
    hits = [m for m in numbers if _as_float(m.group()) in judged]
    step = max(1, len(numbers) // SUBSTITUTIONS_PER_OUTPUT)
    spread = [m for m in numbers[::step] if m not in hits]
    return (hits[:SUBSTITUTIONS_PER_OUTPUT] + spread)[: 2 * SUBSTITUTIONS_PER_OUTPUT]


def _as_float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def mutations(seed: Seed, key: str, judged: set[float]) -> Iterator[tuple[str, list[CommandOutput]]]:
    outputs = seed.outputs
    yield "empty", [replace(o, stdout="", stderr="") for o in outputs]
    yield "garbage", [replace(o, stdout=_garbage(len(key) * 1000 + i)) for i, o in enumerate(outputs)]
    yield "nul", [replace(o, stdout="\x00" * 1000) for o in outputs]
    for i, o in enumerate(outputs):
        label = o.command.label or str(i)
        yield f"{label}: nested arrays", _with_stdout(outputs, i, "[" * 100_000 + "]" * 100_000)
        yield f"{label}: nested objects", _with_stdout(outputs, i, '{"a":' * 50_000 + "1" + "}" * 50_000)
        text = o.stdout
        if not text.strip():
            continue
        for fraction in (0.1, 0.5, 0.9):
            yield f"{label}: truncated at {fraction:.0%}", _with_stdout(outputs, i, text[: int(len(text) * fraction)])
        lines = text.rstrip("\n").split("\n")
        if len(lines) > 1:
            yield f"{label}: last line dropped", _with_stdout(outputs, i, "\n".join(lines[:-1]) + "\n")
        bad = JSON_BAD if _is_json(text) else TEXT_BAD
        for n, match in enumerate(_targets(text, judged)):
            value = bad[n % len(bad)]
            mutated = text[: match.start()] + value + text[match.end() :]
            context = text[max(0, match.start() - 30) : match.end() + 10].replace("\n", " ")
            yield f"{label}: number {match.group()} -> {value} in {context!r}", _with_stdout(outputs, i, mutated)


def _key(m: Measurement) -> tuple[Any, ...]:
    return (m.name, m.gpu, tuple(sorted((k, v) for k, v in m.labels.items() if k != "node")))


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _same(a: float | None, b: float | None) -> bool:
    return (_is_nan(a) and _is_nan(b)) or a == b


def _reached(baseline: list[Measurement], measurements: list[Measurement]) -> bool:
    """Did the mutation change what the verdict rests on: a judged measurement (one the seed's
    evaluate compared with a threshold) changed or gone, or any value no longer finite?"""
    # A check that compares facts across nodes rather than with thresholds (sw_consistency with
    # nothing pinned) rests on every fact it recorded: its values and texts, not their labels.
    if not any(m.ok is not None for m in baseline):

        def facts(ms: list[Measurement]) -> Counter[tuple[Any, ...]]:
            return Counter((m.name, m.gpu, "nan" if _is_nan(m.value) else m.value, m.text) for m in ms)

        if facts(baseline) - facts(measurements):
            return True
    now = {_key(m): m for m in measurements}
    for m in baseline:
        if m.ok is None:
            continue
        other = now.get(_key(m))
        if other is None or not _same(other.value, m.value) or other.text != m.text:
            return True
    return any(isinstance(m.value, float) and not math.isfinite(m.value) for m in measurements)


@pytest.mark.parametrize(
    "key", [*sorted(k for k, c in REGISTRY.items() if not issubclass(c, FanOutCheck)), OLD_ALLTOALL]
)
def test_it_never_passes_hostile_input(key: str, seeds: dict[str, Seed]) -> None:
    seed = seeds[key]
    baseline, _ = seed.judge(seed.outputs)
    judged = {m.value for m in baseline if m.ok is not None and m.value is not None}
    reached = 0
    passed: list[str] = []
    for name, outputs in mutations(seed, key, judged):
        try:
            measurements, verdict = seed.judge(outputs)
        except Exception as exc:  # run_check must turn anything into a verdict
            pytest.fail(f"{key} / {name}: run_check raised {type(exc).__name__}: {exc}")
        if not _reached(baseline, measurements):
            continue  # the mutation did not touch what was judged (see the module docstring)
        reached += 1
        if verdict.status == PASS:
            passed.append(f"{name}: {verdict.reason}")
    assert not passed, f"{key} passed hostile input:\n" + "\n".join(passed)
    assert reached >= 5, f"{key}: only {reached} mutations reached the judged evidence"


def test_mutations_are_deterministic(seeds: dict[str, Seed]) -> None:
    seed = seeds["ib_ports"]
    first = [(n, [o.stdout for o in outs]) for n, outs in mutations(seed, "ib_ports", {400.0})]
    again = [(n, [o.stdout for o in outs]) for n, outs in mutations(seed, "ib_ports", {400.0})]
    assert first == again
