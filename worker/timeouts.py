"""Nested timeouts: remote `timeout` < fabric run timeout < soft limit < hard limit < visibility.

Each layer leaves room for the one inside it to act first, so a hung command is killed on the node
and recorded as `error: timed out`, rather than the worker being killed with nothing recorded.
`portal.runs.services.run_start` refuses a plan whose hard limit would reach the broker's
visibility timeout (a redelivery while the first delivery still runs).

On the default threads pool (portal/settings.py, CELERY_WORKER_POOL) Celery does not enforce the
soft and hard limits: a thread cannot be interrupted. Nothing depends on them there. Every command
is bounded on the node by `timeout -k` and in the worker by the channel backstop
(worker/ssh.py: budget + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S), every connect by
KILN_SSH_CONNECT_TIMEOUT, and a group task stops starting localisation rounds by its own clock
(`time_budget_s`), so a node task ends by the soft limit computed here without being told to. The
limits still travel with each message (a prefork worker, KILN_WORKER_POOL=prefork, enforces them)
and the reaper judges a result that outlives its deadline by them; the tasks' SoftTimeLimitExceeded
handlers only run on such a pool.
"""

from __future__ import annotations

from django.conf import settings

from worker.transport import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S


def node_task_limits(*, command_budgets: list[float], connect_timeout: float) -> tuple[int, int]:
    """(soft, hard) Celery time limits for one node's task running the given commands in order.

    Soft = every command's budget + its kill grace + the channel backstop, two connect timeouts
    (node and jump host), and KILN_TASK_SLACK_S for recording results. Hard = soft + half that slack.
    """
    slack = settings.KILN_TASK_SLACK_S
    per_command = sum(b + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S for b in command_budgets)
    soft = int(per_command + 2 * connect_timeout + slack)
    return soft, soft + max(5, slack // 2)


def group_task_limits(
    *, run_budget_s: float, runs_wanted: int, connect_timeout: float, visibility: int | None
) -> tuple[int, int]:
    """(soft, hard) limits for a group check's task: the group run and up to `runs_wanted - 1`
    rounds of localisation sub-runs, each round `run_budget_s` long (its commands' budgets with
    their kill grace and backstop, as portal.runs.pairs.subrun_budget counts them). Capped below the
    broker's visibility timeout: the task stops starting rounds that would not fit, and says
    so; the group run itself always fits, because run_start refused plans whose node tasks would not."""
    slack = settings.KILN_TASK_SLACK_S
    runs = max(1, runs_wanted)

    def limits(count: int) -> tuple[int, int]:
        soft = int(run_budget_s * count + 2 * connect_timeout + slack)
        return soft, soft + max(5, slack // 2)

    soft, hard = limits(runs)
    while visibility is not None and hard >= visibility and runs > 1:
        runs -= 1
        soft, hard = limits(runs)
    return soft, hard
