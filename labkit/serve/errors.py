"""Why a lane is not (or no longer) serving: each error names the node and shows the end of its log."""

from __future__ import annotations

from labkit.errors import LabkitError, NodeError
from labkit.serve.verdict import check_table, failures

LOG_TAIL_LINES = 40


def log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a node's log, as the errors show them."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class BootError(LabkitError):
    """The lane did not come up: names the node, the reason, and shows the end of that node's log."""

    def __init__(self, lane_id: str, node: str, reason: str, log_tail: str = "", line: str = ""):
        self.lane_id = lane_id
        self.node = node
        self.reason = reason
        self.line = line
        self.log_tail = log_tail
        text = f"lane {lane_id} failed to boot on {node}: {reason}"
        if line:
            text += f"\n  log line: {line.strip()}"
        if log_tail:
            text += f"\n  last lines of {node}'s log:\n" + "\n".join(
                "    | " + s for s in log_tail.splitlines()
            )
        text += "\n  (everything the lane started has been removed)"
        super().__init__(text)


class BootTimeout(BootError):
    """Readiness was not reached within engine.boot_timeout."""


class LaneFailed(LabkitError):
    """A node of a running lane died (e.g. mid-measurement); names it and shows its log tail."""


class LaneBusy(LabkitError):
    """Something of this lane is already present on a node; nothing was started."""


class PreflightFailed(NodeError):
    """A pre-boot check failed on one or more nodes; nothing was started. The message is the table of the failed
    checks (node, check, status, result); `checks` holds every check, `failures` {node: what failed}."""

    def __init__(self, lane_id: str, checks):
        self.checks = list(checks)
        failed = failures(self.checks)
        super().__init__(f"pre-boot checks of lane {lane_id} (nothing was started)", failed)
        table = check_table([c for c in self.checks if c.failed])
        self.args = (
            f"pre-boot checks of lane {lane_id} failed on {', '.join(failed)} (nothing was started):\n"
            + "\n".join("  " + line for line in table.splitlines()),
        )
