"""The check contract: pure Python, no Django, no fabric.

A check turns typed params into commands, the commands' outputs into
measurements, and measurements plus thresholds into a verdict.

Every caller (worker task, `python -m checks parse`, tests) goes through
`run_check(check, params, thresholds, outputs, node)`, which owns the rules
that are the same for every check:

- a command that timed out -> `error` "LABEL timed out after Ns";
- a command with no exit code, or one outside `Check.ok_exit_codes`
  -> `error` "LABEL exited N: <why>" (why = `Check.describe_failure`);
- `parse()` raising `EvidenceError` -> `error` with the exception's message,
  which names what is missing ("probe output is not JSON: ...");
- `parse()` or `evaluate()` crashing -> `error` "internal error in ..."
  (never a pass: no evidence, no pass);
- a measurement that cannot exist (NaN, inf, a negative or fractional count, a
  bandwidth or temperature beyond physical bounds: checks/core/evidence.py, with the
  check's own `Check.evidence` rules) -> `error` "impossible evidence: ..."
  naming the value, before `evaluate` sees it;
- otherwise `evaluate(parse(outputs), thresholds, node)`; a `pass` on measured
  quantities (bandwidths, rates, temperatures...: evidence.QUANTITY_UNITS) that
  judged nothing (no measurement compared with a threshold: `ok` set on none)
  becomes `warn` "not judged: ..." - no threshold is never a bare pass. Checks
  also say it themselves, per quantity (nccl's busbw without a floor). Text
  facts (versions, models) compared across nodes by `consensus` are not
  measured quantities and keep their pass.

In every error case above the measurement list is empty: a parser that
cannot trust its input returns nothing rather than half a picture.
A missing single fact (one counter the driver did not report) is not a parse
failure: parse records a Measurement with value None / text "" and, where
known, `labels["missing"]` = the reason; evaluate turns it into an `error`
finding that names the GPU and the fact. `evaluate()` may annotate the
measurements it judged with `threshold` ("<= 0") and `ok`; run_check returns
those same objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from checks.core import evidence as impossible_evidence
from checks.core.evidence import Rule
from checks.core.presentation import NOTHING, Presentation
from checks.core.schema import ParamsError as ParamsError  # re-exported: checks raise it from here
from checks.core.schema import build
from checks.core.verdict import ERROR as ERROR  # the verdict vocabulary, re-exported: checks import it from here
from checks.core.verdict import FAIL as FAIL
from checks.core.verdict import PASS as PASS
from checks.core.verdict import SKIPPED as SKIPPED
from checks.core.verdict import VERDICT_STATUSES as VERDICT_STATUSES
from checks.core.verdict import WARN as WARN
from checks.core.verdict import Finding as Finding
from checks.core.verdict import GroupVerdict as GroupVerdict
from checks.core.verdict import Verdict as Verdict
from checks.core.verdict import worst_status as worst_status

_C = TypeVar("_C", bound="Check")  # _prepare hands back the kind of check it was given


class EvidenceError(Exception):
    """Raised by `Check.parse` when the output holds no usable evidence.

    The message says what is missing or wrong; `run_check` turns it into an
    `error` verdict with that message and no measurements."""


@dataclass(frozen=True)
class Command:
    """One command to run on a node.

    `argv` is run as a list (quoted by the transport, never by string
    concatenation). `stdin` is fed to the process, e.g. the probe script for
    `python3 -`. `timeout` is the remote limit in seconds: the transport wraps
    the command in `timeout` so the remote process dies with it.

    `read_only`: running it changes nothing on the node (it reads counters,
    logs, versions; it starts no load, writes no file, resets nothing). The
    worker then shares its output with an identical read-only command of a
    later check on the same node, as long as every command run in between
    was read-only too (worker/shared_reads.py): the probe runs once per
    node per run, not once per check. A command that is not read-only (a
    burn-in, NCCL, fio) ends the sharing, so an ECC check after a burn-in
    reads its counters after the burn-in. Set it only when it is true.
    """

    argv: tuple[str, ...]
    timeout: float
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""
    read_only: bool = False

    def display(self) -> str:
        import shlex

        text = shlex.join(self.argv)
        return f"{text} < {self.label or 'stdin'}" if self.stdin is not None else text


@dataclass(frozen=True)
class CommandOutput:
    """What one command produced on one node."""

    command: Command
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    duration_s: float | None = None
    # The transport kept only the head and tail of stdout or stderr (worker/ssh.py's output cap);
    # the cut is marked in the text by a "[... N bytes cut by Kiln ...]" line.
    truncated: bool = False
    # The exact bytes the transport read (head, cut marker and tail when truncated): `stdout` and
    # `stderr` are their UTF-8 decoding with U+FFFD for what does not decode (parsers read those).
    # The portal stores these bytes as the evidence (compressed, with their SHA-256). None: the
    # output was built as text (a parser test, a captured file), and the text is all there is.
    stdout_bytes: bytes | None = field(default=None, repr=False, compare=False)
    stderr_bytes: bytes | None = field(default=None, repr=False, compare=False)
    # What a reader made of this output (reader key -> what it read), so that a large document is
    # read once however often a check asks: burn-in's parse and series both read its 12 h telemetry
    # (checks/core/sampling.py load_sampling). Never part of the evidence; not an __init__ argument, so
    # dataclasses.replace() (a new stdout) starts with an empty one.
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)


@dataclass
class Measurement:
    """One measured fact. `value` is numeric; `text` carries string facts
    (GPU model, driver version). `gpu` is the GPU index when per-GPU."""

    name: str
    value: float | None = None
    unit: str = ""
    gpu: int | None = None
    text: str = ""
    threshold: str = ""
    ok: bool | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NodeContext:
    """What a check may know about the node it runs on.

    `since` is the run's start (Unix seconds): log scanners (Xid) only count events after it.
    `settings` carries per-cluster configuration a check may need (e.g. sensor names).
    `rack` (empty when unknown): localisation by halves keeps racks whole (checks/core/localise.py).
    `scheduler`: the cluster's scheduler integration ("slurm", "k8s", "none"; "" when unknown, as
    in the CLI and tests), for checks that only apply under one (checks/software/slurm_container.py)."""

    hostname: str
    expected_gpus: int | None = None
    address: str = ""
    since: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    rack: str = ""
    scheduler: str = ""


@dataclass(frozen=True)
class GroupContext:
    """A multi-node check's view: the nodes it spans and the launcher it runs from."""

    nodes: tuple[NodeContext, ...]
    launcher: NodeContext
    tag: str = "group"  # unique per run+item (and per pair), for temp file names on the launcher
    # A fan-out check's common start (epoch seconds), set by the executor just before it starts.
    start_at: float | None = None
    # The facility model the check judges against (portal/facility facility_snapshot), when it asks.
    facility: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def hostnames(self) -> list[str]:
        return [n.hostname for n in self.nodes]


@dataclass
class Series:
    """A time series (burn-in telemetry) or a curve (busbw vs message size): `x` and `y` in step."""

    name: str
    unit: str
    x: list[float]
    y: list[float | None]
    gpu: int | None = None
    x_unit: str = "s"
    labels: dict[str, str] = field(default_factory=dict)


class Check:
    """Base class. Subclasses set `key`, `Params`, `Thresholds` and implement
    commands/parse/evaluate. Register with `@register`."""

    key: ClassVar[str]
    # The catalog entry (portal/catalog): what people see and pick. `name` and `description` are
    # the check definition's; `slug` names the definition and stays stable once released (databases
    # hold definitions by slug): set by `register` from the key ("burn_in" -> "burn-in") unless set.
    name: ClassVar[str]
    description: ClassVar[str] = ""
    slug: ClassVar[str] = ""
    # Offered in the catalog as a built-in definition. False: a kind that runs only where something
    # else asks for it (a plan built by code, a test), never picked by people.
    catalogued: ClassVar[bool] = True
    # Params that make the check run on the simulated testbed (testbed/sim) in seconds instead of
    # hours: the demo cluster's plans, the integration tests and the fuzz test use them. Each value
    # carries a comment saying why it is still enough to judge.
    simulator_params: ClassVar[dict[str, Any]] = {}
    Params: ClassVar[type]
    Thresholds: ClassVar[type]
    # Exit codes that mean "the tool ran and printed its evidence". Anything
    # else is an `error` verdict in run_check, before parse is called.
    ok_exit_codes: ClassVar[tuple[int, ...]] = (0,)
    # "node": runs on every node of the run. "group": runs once, from a launcher node, over the
    # run's reachable nodes (subclass GroupCheck).
    scope: ClassVar[str] = "node"
    # Per hardware profile key, threshold (and param) values on top of the check's defaults.
    # Every number carries a comment with its source. Merged by HardwareProfile.thresholds_for.
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {}
    profile_params: ClassVar[dict[str, dict[str, Any]]] = {}
    # Measurement name -> what its value must be (checks/core/evidence.py), on top of the rules every
    # unit carries ("C", "GB/s"...): counts, flags, sentinels the check knows about.
    evidence: ClassVar[dict[str, Rule]] = {}
    # How the portal shows this kind: chart, key metrics, trends, /metrics, outliers, certificate
    # (checks/core/presentation.py). The default shows the verdict and measurements only.
    presentation: ClassVar[Presentation] = NOTHING

    @classmethod
    def make_params(cls, values: dict[str, Any] | None) -> Any:
        return build(cls.Params, values or {}, what="param")

    @classmethod
    def make_thresholds(cls, values: dict[str, Any] | None) -> Any:
        return build(cls.Thresholds, values or {}, what="threshold")

    @classmethod
    def default_params(cls) -> dict[str, Any]:
        return dataclasses.asdict(cls.Params())

    @classmethod
    def default_thresholds(cls) -> dict[str, Any]:
        return dataclasses.asdict(cls.Thresholds())

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        raise NotImplementedError

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        raise NotImplementedError

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        raise NotImplementedError

    def timeout(self, params: Any) -> float:
        """Total remote time budget of this check's commands, in seconds."""
        return sum(c.timeout for c in self.commands(params, NodeContext(hostname="-")))

    # How long a check without a duration param usually takes on a node: a few reads (the probe's
    # NVML queries, nvidia-smi, ibstat; about 1-2 s each on an 8-GPU node) over one SSH connection
    # (~60 ms a connect, 80-125 ms an exec, paramiko as measured on 2-core machines), rounded up.
    SHORT_CHECK_S: ClassVar[float] = 20.0
    # What the check spends besides the duration its params set (connects, tool start-up, reads) on
    # real hardware over SSH. A cluster whose nodes answer faster or slower (simulated nodes, a
    # distant site) declares its own figure for estimates (Cluster.check_overhead_s).
    OVERHEAD_S: ClassVar[float] = SHORT_CHECK_S

    def declared_s(self, params: Any) -> float:
        """The part of the check's time that its (typed) params set, in seconds: a burn-in's
        duration, a soak, a sampling window. It lasts as long wherever the check runs. 0 for a
        check that only reads."""
        return 0.0

    def expected_s(self, params: Any) -> float:
        """How long the check usually takes with these params on real hardware, in seconds: its
        declared duration plus its overhead (its time budget, `timeout`, is the worst case)."""
        return self.declared_s(params) + self.OVERHEAD_S

    def series(self, outputs: list[CommandOutput]) -> list[Series]:
        """Time series / curves to store beside the measurements (telemetry, busbw by size).
        Pure; called only when run_check found the outputs usable."""
        return []

    # The measurement names `consensus` reads (None: every measurement): closing a run reads only
    # these for every node (at 1,250 nodes an inventory is 145 rows a node, 4 of them facts).
    consensus_names: ClassVar[frozenset[str] | None] = None

    @classmethod
    def consensus(cls, per_node: dict[str, list[Measurement]]) -> dict[str, str]:
        """Cross-node agreement, after every node ran: hostname -> reason for the odd ones out.
        Checks whose facts must match across a cluster (driver, firmware) override this."""
        return {}

    def describe_failure(self, output: CommandOutput) -> str:
        """Why a command failed, for the `error` reason: the last stderr line
        by default. Checks whose tool prints its own diagnosis override it."""
        lines = [line.strip() for line in output.stderr.splitlines() if line.strip()]
        return lines[-1][:300] if lines else "no stderr"


REGISTRY: dict[str, type[Check]] = {}


def register(cls: type[Check]) -> type[Check]:
    if cls.key in REGISTRY:
        raise ValueError(f"check kind {cls.key!r} registered twice")
    if not cls.__dict__.get("slug"):
        cls.slug = cls.key.replace("_", "-")
    taken = [k for k, c in REGISTRY.items() if c.slug == cls.slug]
    if taken:
        raise ValueError(f"check kind {cls.key!r}: slug {cls.slug!r} is already {taken[0]!r}'s")
    REGISTRY[cls.key] = cls
    return cls


def catalogued() -> list[type[Check]]:
    """The kinds offered in the catalog, by slug."""
    return sorted((c for c in REGISTRY.values() if c.catalogued), key=lambda c: c.slug)


def by_slug(slug: str) -> type[Check] | None:
    """The registered kind whose catalog slug is `slug` (None: no such kind)."""
    return next((c for c in REGISTRY.values() if c.slug == slug), None)


def simulator_params(slug: str) -> dict[str, Any]:
    """The simulator-speed params of the kind with catalog slug `slug` ({}: none, or no such kind)."""
    cls = by_slug(slug)
    return dict(cls.simulator_params) if cls is not None else {}


def get_group_check(key: str) -> GroupCheck:
    """get_check for the callers that run a group check: its group attributes, typed."""
    check = get_check(key)
    if not isinstance(check, GroupCheck):
        raise TypeError(f"check kind {key!r} is not a group check")
    return check


def get_check(key: str) -> Check:
    try:
        return REGISTRY[key]()
    except KeyError:
        raise KeyError(f"unknown check kind {key!r}; known: {', '.join(sorted(REGISTRY))}") from None


def run_check(
    check: Check | type[Check],
    params: Any,
    thresholds: Any,
    outputs: list[CommandOutput],
    node: NodeContext,
) -> tuple[list[Measurement], Verdict]:
    """Turn one check's command outputs on one node into (measurements, verdict).

    The single place where timeouts, exit codes and unusable output become
    `error` (see the module docstring). `params`/`thresholds` may be schema
    instances or plain dicts (validated through make_params/make_thresholds,
    so a bad key raises ParamsError before anything is judged)."""
    prepared, thresholds = _prepare(check, params, thresholds)
    return _judge(prepared, outputs, lambda measurements: prepared.evaluate(measurements, thresholds, node))


def run_group_check(
    check: GroupCheck | type[GroupCheck],
    params: Any,
    thresholds: Any,
    outputs: list[CommandOutput],
    group: GroupContext,
) -> tuple[list[Measurement], Verdict]:
    """`run_check` for a group check: the same error rules, then `evaluate_group`."""
    prepared, thresholds = _prepare(check, params, thresholds)
    return _judge(prepared, outputs, lambda measurements: prepared.evaluate_group(measurements, thresholds, group))


def _prepare(check: _C | type[_C], params: Any, thresholds: Any) -> tuple[_C, Any]:
    if isinstance(check, type):
        check = check()
    if params is None or isinstance(params, dict):
        check.make_params(params)
    if thresholds is None or isinstance(thresholds, dict):
        thresholds = check.make_thresholds(thresholds)
    return check, thresholds


def _judge(
    check: Check, outputs: list[CommandOutput], evaluate: Callable[[list[Measurement]], Verdict]
) -> tuple[list[Measurement], Verdict]:
    if not outputs:
        return [], Verdict(status=ERROR, reason="no command output to judge (nothing ran)")
    failed = _failed_command(check, outputs)
    if failed is not None:
        return [], failed
    parsed = _parsed(check, outputs)
    if isinstance(parsed, Verdict):
        return [], parsed
    return _evaluated(check, outputs, parsed, evaluate)


def _label(command: Command) -> str:
    return command.label or (command.argv[0] if command.argv else "command")


def _failed_command(check: Check, outputs: list[CommandOutput]) -> Verdict | None:
    """The `error` of the first command that timed out, lost its exit code or exited badly."""
    for out in outputs:
        label = _label(out.command)
        if out.timed_out:
            limit = out.command.timeout
            return Verdict(status=ERROR, reason=f"{label} timed out after {limit:g}s")
        if out.exit_code is None:
            return Verdict(status=ERROR, reason=f"{label} returned no exit code (connection lost?)")
        if out.exit_code not in check.ok_exit_codes:
            return Verdict(status=ERROR, reason=f"{label} exited {out.exit_code}: {_describe_failure(check, out)}")
    return None


def _describe_failure(check: Check, out: CommandOutput) -> str:
    try:
        return check.describe_failure(out)
    except Exception as exc:  # describing hostile output (deeply nested JSON, say) must not crash
        return f"(its output could not be described: {type(exc).__name__})"


def _parsed(check: Check, outputs: list[CommandOutput]) -> list[Measurement] | Verdict:
    """The parsed measurements, or the `error` saying why there are none to trust."""
    try:
        measurements = check.parse(outputs)
        impossible = impossible_evidence.problems(measurements, check.evidence)
    except EvidenceError as exc:
        return Verdict(status=ERROR, reason=str(exc))
    except Exception as exc:  # a parser bug must not become a pass, nor crash the caller
        return Verdict(status=ERROR, reason=f"internal error in {check.key} parser: {type(exc).__name__}: {exc}")
    if impossible:
        return Verdict(status=ERROR, reason=impossible_evidence.reason(impossible))
    return measurements


def _evaluated(
    check: Check,
    outputs: list[CommandOutput],
    measurements: list[Measurement],
    evaluate: Callable[[list[Measurement]], Verdict],
) -> tuple[list[Measurement], Verdict]:
    try:
        verdict = evaluate(measurements)
        # evaluate() may add derived measurements (an aggregate); they obey the same rules.
        impossible = impossible_evidence.problems(measurements, check.evidence)
    except EvidenceError as exc:
        return measurements, Verdict(status=ERROR, reason=str(exc))
    except Exception as exc:
        reason = f"internal error in {check.key} evaluation: {type(exc).__name__}: {exc}"
        return measurements, Verdict(status=ERROR, reason=reason)
    if impossible:
        return [], Verdict(status=ERROR, reason=impossible_evidence.reason(impossible))
    if verdict.status not in VERDICT_STATUSES:
        return measurements, Verdict(status=ERROR, reason=f"internal error in {check.key}: verdict {verdict.status!r}")
    return measurements, _qualified(verdict, outputs, measurements)


def _qualified(verdict: Verdict, outputs: list[CommandOutput], measurements: list[Measurement]) -> Verdict:
    """A pass or warn on a truncated output is `error`; a pass that compared nothing is `warn`."""
    cut = [o for o in outputs if o.truncated]
    if cut and verdict.status in (PASS, WARN):
        return _cut(verdict, cut)
    measured = [m for m in measurements if m.value is not None and m.unit in impossible_evidence.QUANTITY_UNITS]
    if verdict.status == PASS and measured and not any(m.ok is not None for m in measurements):
        return _not_judged(verdict)
    return verdict


def _cut(verdict: Verdict, cut: list[CommandOutput]) -> Verdict:
    """A verdict no worse than warn on an output whose middle the transport dropped (over its read
    cap, worker/ssh.py): what was cut (an Xid line, a result row, an error count) cannot be judged,
    so it is `error`. A fail found in what was kept stands (it is returned unchanged by the caller)."""
    labels = ", ".join(_label(o.command) for o in cut)
    reason = f"output truncated by the transport ({labels}: over its read cap); what was cut cannot be judged"
    findings = [*verdict.findings, Finding(ERROR, reason)]
    if isinstance(verdict, GroupVerdict):
        return GroupVerdict(status=ERROR, reason=reason, findings=findings, node_verdicts=dict(verdict.node_verdicts))
    return Verdict(status=ERROR, reason=reason, findings=findings)


def _not_judged(verdict: Verdict) -> Verdict:
    """A pass that compared nothing with a threshold is a record, not a judgement: `warn`."""
    reason = f"not judged: no threshold applied to any measurement ({verdict.reason})"
    warned = Verdict(status=WARN, reason=reason, findings=[*verdict.findings, Finding(WARN, reason)])
    if isinstance(verdict, GroupVerdict):
        return GroupVerdict(
            status=WARN, reason=reason, findings=warned.findings, node_verdicts=dict(verdict.node_verdicts)
        )
    return warned


class GroupCheck(Check):
    """A check that spans nodes (NCCL across nodes, aggregate filesystem): it runs from a launcher
    node (mpirun/srun with a hostfile) and records one result for the group, with per-node
    attribution in `GroupVerdict.node_verdicts`.

    `commands(params, node)` is not used; `group_commands(params, group)` is. `evaluate` receives
    the launcher's NodeContext; `evaluate_group` receives the GroupContext and is what the executor
    calls. A check that supports localisation sets `pairwise = True`: when the group verdict is not
    pass, the executor runs `group_commands` on halves of the group, then on pairs with nodes that
    passed, and judges each with `evaluate_group` (checks/core/localise.py decides which, and names the
    node(s) whose pairs with a known-good partner are not within spec)."""

    scope: ClassVar[str] = "group"
    pairwise: ClassVar[bool] = False
    min_nodes: ClassVar[int] = 2

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        return self.group_commands(params, GroupContext(nodes=(node,), launcher=node))

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        raise NotImplementedError

    def stand_in_commands(self, params: Any, node_count: int = 2) -> list[Command]:
        """The commands of one run over two placeholder nodes: what a run's time budget is made of
        (the commands' timeouts do not depend on which nodes run them, nor, here, on how many)."""
        a, b = NodeContext(hostname="node-a"), NodeContext(hostname="node-b")
        return self.group_commands(params, GroupContext(nodes=(a, b), launcher=a, tag="budget"))

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        return self.evaluate_group(measurements, thresholds, GroupContext(nodes=(node,), launcher=node))

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        raise NotImplementedError
