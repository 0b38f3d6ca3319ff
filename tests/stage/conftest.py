"""Fixtures of the staging tests: the four sshd nodes (tests/conftest.py `cluster`), a fresh view path on each;
a small real filesystem on this machine; a one-node local-view world on this machine."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from labkit.nodes import HostGroup
from labkit.nodes.group import host_for
from tests.support.hf_cache import LocalNode, make_cache, plan_for
from tests.support.nodes import ADDRESSES


@pytest.fixture
def nodes(cluster):
    if not cluster.private_disks:
        pytest.skip("nodes have no private disks here (unshare --mount needs root)")
    group = HostGroup([host_for(a, None, 22, 5, cluster.ssh_options()) for a in ADDRESSES])
    dst = f"{cluster.disk_path}/staging-{uuid.uuid4().hex[:8]}/dsv-local"
    yield group, dst
    group.run(["rm", "-rf", os.path.dirname(dst), f"{cluster.disk_path}/ballast"], "cleanup", check=False)
    group.close()


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs mounted in a temp dir (root only)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def world(tmp_path):
    """(plan, snapshot, dst, [LocalNode]): a fake shared HF cache and a one-node local-view plan on it."""
    cache = tmp_path / "nas" / "hub"
    snap = make_cache(cache)
    dst = tmp_path / "node-disk" / "views" / "tiny-local"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    return plan, snap, dst, [LocalNode("n1")]
