"""Step 2, stage: a `LanePlan` with a local-view staging entry in, a verified view on every node out
(copies of the hot shards, symlinks into the shared cache for the rest, a manifest of blob names, sampled
hashes and, with deep verification, whole-file SHA-256s; docs/staging.md).

Assessment is pure (`assess` for the local files, `handmade` for the view's other names, `deep` for whole-file
hashes, `space` for the space check, over the terms of `viewstate` and the `sources`); the node side is a
stdlib-only script sent over SSH as it reads (`node/script.py`), called through `transport`; `probing` runs
the read-only steps, `run` the rest (build, verify; `build` does step 3 on one node and the manifest) and
`reports` says what they did. With copies for more than one node, `fanout` plans the node-to-node chains
(docs/fanout.md), `fanout_requests` builds the node ops' requests, `fanout_run` runs them with the fan-out's
own node script (`node/peer.py` and its parts, joined and sent by `peer_ops`) and `fanout_report` says what
it did.
"""

from labkit.stage.reports import StageReport
from labkit.stage.run import check_view, preflight, stage
from labkit.stage.space import preflight_table

__all__ = [
    "StageReport",
    "check_view",
    "preflight",
    "preflight_table",
    "stage",
]
