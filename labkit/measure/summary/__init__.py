"""Records into a `RunSummary` (compose): each workload's measures (speed, content, turns, depth, canary), the
run-wide ones from the counters (counters), the engine's own figures (engine) and the windows' evidence
(evidence), the output sanity that leaves out a failed window's figures (sanity), and the lab-note
rendering (text).
"""
