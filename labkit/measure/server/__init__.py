"""What the engine says about itself: its per-request figures in the response (servertruth), its /metrics
counters turned into deltas (metrics) around each window (scrapes), its gauges waited on between requests
(drain) and its KV pool read from its API (kvpool).
"""
