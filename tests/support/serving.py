"""Shared helpers for the serving tests: simulator lanes on the sshd nodes, the CLI in a subprocess, and the
check every failure test ends with (nothing of the lane left anywhere)."""

from __future__ import annotations

import os
import subprocess
import sys

from labkit import tinymodel
from labkit.serve import Lane
from labkit.store import RunFolderSink
from tests.support.lanes import sim_recipe
from tests.support.nodes import REPO


def served_plan(plan):
    """The plan as the callers of Lane hand it over: a labkit-built model (model.repo "labkit/<preset>")
    materialized first; the simulator's "labkit/sim-test" is not one, so it is returned unchanged."""
    return tinymodel.materialize(plan)


def cluster_lane(cluster, tmp_path, port, nodes=None, **kw) -> Lane:
    """A simulator lane on the sshd nodes (docker runtime via the shim unless `runtime` says otherwise)."""
    kw.setdefault("runtime", "docker")
    plan = sim_recipe(
        tmp_path / kw.pop("name", "lane-4x"),
        port,
        nodes=nodes or cluster.addresses,
        ssh_port=cluster.port,
        user=cluster.user,
        **kw,
    )
    return Lane(
        served_plan(plan),
        ssh=cluster.ssh_options(),
        sink=RunFolderSink(tmp_path / "run"),
        poll=0.1,
        stop_grace=3,
    )


def assert_clean_cluster(lane: Lane, cluster) -> None:
    assert set(lane.status().values()) == {"absent"}
    assert lane.leftovers() == {}
    for addr in cluster.addresses:
        assert cluster.containers(addr) == [], addr
    assert cluster.processes() == []


def labkit_cli(*args, env=None, **kw) -> subprocess.Popen:
    """`python -m labkit ARGS` on this checkout, stdout and stderr piped (text)."""
    full = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "labkit", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )
