"""The node side of staging: the scripts a node runs, each shipped as one stdlib-only file, as it reads.

In: an op and its JSON request. Out: JSON lines on stdout. `script.py` is the staging ops (probe, hash,
build, write, check; labkit.stage.transport sends it), `peer.py` the fan-out's node-to-node copies
(labkit.stage.fanout_run sends it). Nothing is imported here: each file is also importable on its own (tests,
the controller's constants).
"""
