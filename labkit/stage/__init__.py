"""Step 2, stage: a `LanePlan` with a local-view staging entry in, a verified view on every node out
(copies of the hot shards, symlinks into the shared cache for the rest, a manifest of sampled hashes).

Assessment is pure; the node side is a stdlib-only script sent over SSH (`node_script`).
"""

from labkit.stage.staging import (
    StageReport,
    StagingRefused,
    check_view,
    preflight,
    preflight_table,
    stage,
)

__all__ = ["StageReport", "StagingRefused", "check_view", "preflight", "preflight_table", "stage"]
