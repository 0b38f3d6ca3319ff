"""One check's verdict on one node (`Check`), the statuses, and the tables that show them: the error of a
refused start and `labkit doctor`'s report (docs/engines.md, "Pre-boot checks and labkit doctor"). Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

OK, FAIL, WARN, SKIP = "ok", "FAIL", "warn", "-"  # SKIP: not checked (the result says why)
# The order checks are listed in, per node.
ORDER = (
    "ssh",
    "image",
    "fabric",
    "fabric net",
    "reach",
    "cabling",
    "rdma",
    "memory",
    "gpu",
    "page cache",
    "boot state",
    "engine args",
    "probe",
)


@dataclass(frozen=True)
class Check:
    """One check on one node: its status and what was found; `facts` keeps the numbers for provenance."""

    node: str
    check: str
    status: str
    result: str
    facts: dict = field(default_factory=dict, compare=False)

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> dict:
        return asdict(self)


def ordered(checks: list[Check], nodes: list[str]) -> list[Check]:
    """By node (the lane's order), then by check (ORDER), keeping the order within one check."""
    rank = {n: i for i, n in enumerate(nodes)}
    return sorted(
        checks,
        key=lambda c: (rank.get(c.node, len(rank)), ORDER.index(c.check) if c.check in ORDER else len(ORDER)),
    )


def check_table(checks: list[Check]) -> str:
    """node | check | status | result, one row per check."""
    from tabulate import tabulate

    rows = [[c.node, c.check, c.status, c.result] for c in checks]
    return tabulate(rows, headers=["node", "check", "status", "result"], disable_numparse=True)


def node_tables(checks: list[Check], head: str = "") -> str:
    """A table per node (check | status | result), the head marked, in the order the checks come."""
    from tabulate import tabulate

    nodes = list(dict.fromkeys(c.node for c in checks))
    parts = []
    for node in nodes:
        rows = [[c.check, c.status, c.result] for c in checks if c.node == node]
        title = node + ("  (head)" if node == head else "")
        body = tabulate(rows, headers=["check", "status", "result"], disable_numparse=True)
        parts.append(title + "\n" + "\n".join("  " + line for line in body.splitlines()))
    return "\n\n".join(parts)


def failures(checks: list[Check]) -> dict[str, str]:
    """{node: "check: result; ..."} of the failed checks, for a NodeError."""
    out: dict[str, list[str]] = {}
    for c in checks:
        if c.failed:
            out.setdefault(c.node, []).append(f"{c.check}: {c.result}")
    return {n: "; ".join(items) for n, items in out.items()}
