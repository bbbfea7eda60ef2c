"""Nested timeouts: remote `timeout` < fabric run timeout < soft limit < hard limit < visibility.

Each layer leaves room for the one inside it to act first, so a hung command is killed on the node
and recorded as `error: timed out`, rather than the worker being killed with nothing recorded.
"""

from __future__ import annotations

from worker.ssh import CHANNEL_SLACK_S, REMOTE_KILL_GRACE_S

# Soft limit slack over the node's summed command budgets: SSH connect + the channel backstop of
# each command + recording results in the database.
SOFT_LIMIT_SLACK_S = 60
# Between the soft limit (SoftTimeLimitExceeded, the task records `error`) and the hard kill.
HARD_LIMIT_SLACK_S = 30


def node_task_limits(*, command_budgets: list[float], connect_timeout: float) -> tuple[int, int]:
    """(soft, hard) Celery time limits for one node's task running the given commands in order."""
    per_command = sum(b + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S for b in command_budgets)
    soft = int(per_command + 2 * connect_timeout + SOFT_LIMIT_SLACK_S)
    return soft, soft + HARD_LIMIT_SLACK_S
