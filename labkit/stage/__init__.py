"""Step 2, stage: a `LanePlan` with a local-view staging entry in, a verified view on every node out
(copies of the hot shards, symlinks into the shared cache for the rest, a manifest of blob names, sampled
hashes and, with deep verification, whole-file SHA-256s; docs/staging.md).

Assessment is pure (`assess` for the local files, `handmade` for the view's other names, `deep` for whole-file
hashes, `space` for the space check, over the terms of `viewstate` and the `sources`); the node side is a
stdlib-only script sent over SSH as it reads (`node/script.py`), called through `transport`; `probing` runs
the read-only steps, `run` the rest (build, verify; `build` does step 3 on one node and the manifest) and
`reports` says what they did. With copies for more than one node, `fanout` plans the node-to-node chains
(docs/fanout.md) and `fanout_run` runs them with the fan-out's own node script (`node/peer.py`).
"""

from labkit.stage.assess import (
    MANIFEST_NAME,
    PARTIAL_PREFIX,
    NodeAssessment,
    assess,
    check_entry,
    view_owned_names,
)
from labkit.stage.build import build_manifest
from labkit.stage.fanout import Chain, FanoutFile, FanoutPlan, needs_from, plan_fanout
from labkit.stage.fanout_run import FanoutReport, Fetched, PeerTimeouts, fabric_binds, fan_out
from labkit.stage.node.script import SAMPLE_BLOCK, SAMPLE_COUNT, block_lengths, sample_offsets
from labkit.stage.probing import probe_node
from labkit.stage.reports import CopyProgress, NodeReport, StageReport, ViewReport
from labkit.stage.run import check_view, local_views, preflight, stage
from labkit.stage.sources import Source, sample_hashes, sources_from
from labkit.stage.space import StagingRefused, check_space, preflight_rows, preflight_table
from labkit.stage.transport import (
    HostLike,
    NodeJobs,
    Timeouts,
    call_node,
    node_command,
    node_script,
    parse_node_output,
)
from labkit.stage.viewstate import VERIFY_MODES, FileState

__all__ = [
    "MANIFEST_NAME",
    "PARTIAL_PREFIX",
    "SAMPLE_BLOCK",
    "SAMPLE_COUNT",
    "VERIFY_MODES",
    "Chain",
    "CopyProgress",
    "FanoutFile",
    "FanoutPlan",
    "FanoutReport",
    "Fetched",
    "FileState",
    "HostLike",
    "NodeAssessment",
    "NodeJobs",
    "NodeReport",
    "PeerTimeouts",
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
    "fabric_binds",
    "fan_out",
    "local_views",
    "needs_from",
    "node_command",
    "node_script",
    "parse_node_output",
    "plan_fanout",
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
