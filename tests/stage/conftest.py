"""Fixtures of the staging tests: the four sshd nodes (tests/conftest.py `cluster`), a fresh view path on each."""

from __future__ import annotations

import os
import uuid

import pytest

from labkit.nodes import HostGroup, host_for
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
