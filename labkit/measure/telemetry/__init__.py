"""What the nodes did while a run measured: a sampler per node (sampling) whose lines become series (series),
summarized per window with energy per token (energy) and health marks (health); and the NFS counters sampled
around a run (io_probe).
"""
