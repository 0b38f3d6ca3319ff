"""Records into a `RunSummary` (compose): each workload's measures (speed, content, turns, depth, canary), the
run-wide ones from the counters (counters), the engine's own figures (engine) and the windows' evidence
(evidence), the output sanity that leaves out a failed window's figures (sanity), the lab-note
rendering (text), and the latency percentiles, SLO attainment and goodput of a load level (latency; not yet
read by a workload).
"""
