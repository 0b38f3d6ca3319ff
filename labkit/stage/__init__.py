"""Step 2, stage: a `LanePlan` with a local-view staging entry in, a verified view on every node out
(copies of the hot shards, symlinks into the shared cache for the rest, a manifest of sampled hashes).

Assessment is pure (`assess`; `space` for the space check); the node side is a stdlib-only script sent
over SSH (`node/`, joined into one script), called through `transport`; `run` runs the steps (probe, preflight, build,
verify; `build` does step 3 on one node and the manifest) and `reports` says what they did.
"""

from labkit.stage.assess import (
    MANIFEST_NAME,
    PARTIAL_PREFIX,
    FileState,
    NodeAssessment,
    Source,
    assess,
    check_entry,
    sample_hashes,
    sources_from,
    view_owned_names,
)
from labkit.stage.build import build_manifest
from labkit.stage.node.base import SAMPLE_BLOCK, SAMPLE_COUNT, block_lengths, sample_offsets
from labkit.stage.reports import CopyProgress, NodeReport, StageReport, ViewReport
from labkit.stage.run import check_view, local_views, preflight, probe_node, stage
from labkit.stage.space import StagingRefused, check_space, preflight_rows, preflight_table
from labkit.stage.transport import (
    NODE_MODULES,
    HostLike,
    NodeJobs,
    Timeouts,
    call_node,
    join_node_script,
    node_command,
    node_script,
    parse_node_output,
)

__all__ = [
    "MANIFEST_NAME",
    "NODE_MODULES",
    "PARTIAL_PREFIX",
    "SAMPLE_BLOCK",
    "SAMPLE_COUNT",
    "CopyProgress",
    "FileState",
    "HostLike",
    "NodeAssessment",
    "NodeJobs",
    "NodeReport",
    "Source",
    "StageReport",
    "StagingRefused",
    "Timeouts",
    "ViewReport",
    "assess",
    "block_lengths",
    "build_manifest",
    "call_node",
    "check_entry",
    "check_space",
    "check_view",
    "local_views",
    "join_node_script",
    "node_command",
    "node_script",
    "parse_node_output",
    "preflight",
    "preflight_rows",
    "preflight_table",
    "probe_node",
    "sample_hashes",
    "sample_offsets",
    "sources_from",
    "stage",
    "view_owned_names",
]
