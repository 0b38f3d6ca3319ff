"""Staging on the four real sshd nodes (tests/support/nodes.py): each node has its own tmpfs at the same path
(the `nodes` fixture: tests/stage/conftest.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.errors import NodeError
from labkit.nodes.group import host_for
from labkit.stage import check_view, stage
from labkit.stage.node.script import sample_offsets
from labkit.stage.space import StagingRefused
from labkit.stage.transport import Timeouts
from tests.support.hf_cache import (
    COMMIT,
    COMMIT2,
    LOCAL,
    blob_name,
    default_files,
    make_cache,
    new_revision,
    plan_for,
    write_recipe,
)
from tests.support.nodes import ADDRESSES
from tests.support.staging import (
    LIST_VIEW,
    differ_between_samples,
    gap_between_samples,
    hanging_cache,
    remote_json,
)

SHORT = "127.0.0.4"  # dgx7, the lab note's binding node


def test_four_nodes_get_verified_views_then_verification_only(nodes, tmp_path):
    group, dst = nodes
    snap = make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    report = stage(plan, group, progress=False)
    view = report.views[0]
    assert set(view.nodes) == set(ADDRESSES)
    files = default_files()
    for addr, node in view.nodes.items():
        assert (node.copied, node.adopted, node.verified, node.linked) == (2, 0, 0, 4), addr
        assert node.bytes_copied == sum(len(files[n]) for n in LOCAL)
        listing = remote_json(group.hosts[ADDRESSES.index(addr)], LIST_VIEW.format(dst=dst))
        for name in LOCAL:
            assert listing[name]["link"] is None and listing[name]["size"] == len(files[name])
        assert listing["config.json"]["link"] == f"{snap}/config.json" and listing["config.json"]["ok"]
        assert ".labkit-view.json" in listing
    # The views are on each node's private disk: invisible from here.
    assert not os.path.exists(dst)
    assert check_view(plan, group) == {a: 4 for a in ADDRESSES}
    again = stage(plan, group, progress=False)
    assert again.verification_only
    assert all(n.verified == 2 for n in again.views[0].nodes.values())


def test_one_short_node_refuses_everything_before_any_change(nodes, tmp_path, cluster):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES), min_free="1M")
    short = group.hosts[ADDRESSES.index(SHORT)]
    free = remote_json(
        short,
        f"import os, json; v = os.statvfs({cluster.disk_path!r}); print(json.dumps(v.f_bavail * v.f_frsize))",
    )
    ballast = free - 3_000_000  # leaves 3 MB: less than the 3.6 MB of shards + 1 MB min_free
    assert short.run(["fallocate", "-l", str(ballast), f"{cluster.disk_path}/ballast"]).exit_code == 0
    before = group.run(["ls", "-la", cluster.disk_path], "listing")
    with pytest.raises(StagingRefused) as e:
        stage(plan, group, progress=False)
    msg = str(e.value)
    assert f"binding node {SHORT}" in msg and "refused before changing anything" in msg
    for addr in ADDRESSES:
        assert addr in msg  # the per-node table lists every node
    assert [r["node"] for r in e.value.rows if r["margin"] < 0] == [SHORT]
    after = group.run(["ls", "-la", cluster.disk_path], "listing")
    assert {n: r.stdout for n, r in after.items()} == {n: r.stdout for n, r in before.items()}
    for h in group:
        assert h.run(["test", "-e", os.path.dirname(dst)]).exit_code == 1, h.name
    short.run(["rm", "-f", f"{cluster.disk_path}/ballast"])
    report = stage(plan, group, progress=False)
    assert all(n.copied == 2 for n in report.views[0].nodes.values())


def test_progress_streams_over_ssh_while_the_command_runs(nodes):
    group, _ = nodes
    h = group.hosts[0]
    seen = []
    r = h.run_streaming("echo one; sleep 0.6; echo two", on_line=lambda line: seen.append(line))
    assert r.exit_code == 0 and r.stdout == "one\ntwo\n" and seen == ["one", "two"]


def test_cli_stage_over_ssh(nodes, tmp_path, cluster):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    folder = write_recipe(
        tmp_path / "recipe", tmp_path / "nas" / "hub", dst, list(ADDRESSES), ssh_port=cluster.port
    )
    env = {**os.environ, **cluster.cli_env(), "LABKIT_RECIPES": str(tmp_path)}
    cmd = [sys.executable, "-m", "labkit", "stage", str(folder / "recipe.toml")]
    r = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "binding" in r.stdout and all(a in r.stdout for a in ADDRESSES)  # the preflight table
    for h in group:
        assert h.run(["test", "-e", os.path.dirname(dst)]).exit_code == 1
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "copied" in r.stdout and all(a in r.stdout for a in ADDRESSES)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "verification only" in r.stdout


def test_damage_on_one_node_is_repaired_there_only(nodes, tmp_path):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    stage(plan, group, progress=False)
    victim = group.hosts[1]
    name = LOCAL[1]
    offset = sample_offsets(len(default_files()[name]))[3] + 17
    flip = (
        f"f = open({dst + '/' + name!r}, 'r+b'); f.seek({offset}); b = f.read(1); f.seek({offset}); "
        "f.write(bytes([b[0] ^ 1])); f.close()"
    )
    assert victim.run(["python3", "-c", flip]).exit_code == 0
    report = stage(plan, group, progress=False)
    nodes_ = report.views[0].nodes
    assert nodes_[victim.name].copied == 1 and str(offset - 17) in nodes_[victim.name].repaired[0]
    assert all(n.copied == 0 and n.verified == 2 for a, n in nodes_.items() if a != victim.name)
    assert stage(plan, group, progress=False).verification_only


def test_unreachable_node_fails_the_preflight_and_nothing_is_changed(nodes, tmp_path, cluster):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    dead = host_for("127.0.0.9", None, 22, 2, cluster.ssh_options())  # no sshd there
    hosts = [*group.hosts[:3], dead]
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, [h.name for h in hosts])
    with pytest.raises(NodeError) as e:
        stage(plan, hosts, progress=False)
    assert "127.0.0.9" in e.value.failures and "nothing was changed" in str(e.value)
    assert set(e.value.failures) == {"127.0.0.9"}
    for h in group.hosts[:3]:
        assert h.run(["test", "-e", os.path.dirname(dst)]).exit_code == 1


def test_users_links_in_a_non_view_dst_survive_on_every_node(nodes, tmp_path):
    """dst mistyped as a folder of the user's own model links (no manifest): nothing of the user's is deleted."""
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    group.run(["sh", "-c", 'mkdir -p "$1" && ln -s /usr/share "$1/other-model"', "sh", dst], "user's links")
    report = stage(plan, group, progress=False)
    for h in group:
        listing = remote_json(h, LIST_VIEW.format(dst=dst))
        assert listing["other-model"]["link"] == "/usr/share", h.name
        assert listing[LOCAL[0]]["link"] is None and listing["config.json"]["ok"]
        assert any(
            "other-model" in w and "left in place" in w for w in report.views[0].nodes[h.name].warnings
        )


def test_a_node_whose_probe_hangs_is_named_within_the_timeout(nodes, tmp_path, cluster):
    """A hung read (a FIFO where the shared cache has a shard) on every node: each node is named, within the
    timeout, nothing is changed and no node-script process is left behind on the nodes."""
    group, dst = nodes
    hanging_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    t0 = time.monotonic()
    with pytest.raises(NodeError) as e:
        stage(plan, group, progress=False, timeouts=Timeouts(node=2.0))
    assert time.monotonic() - t0 < 12
    assert set(e.value.failures) == set(ADDRESSES)
    assert all("probe timed out after 2 s" in why for why in e.value.failures.values())
    for h in group:
        assert h.run(["test", "-e", os.path.dirname(dst)]).exit_code == 1
    deadline = time.monotonic() + 10
    while (
        any("Node side of staging" in cmd for _, cmd in cluster.processes()) and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not [cmd[:80] for _, cmd in cluster.processes() if "Node side of staging" in cmd]


def test_ssh_connections_send_keepalives(nodes):
    """A node that drops off the network is noticed on an idle connection too (paramiko keepalive)."""
    group, _ = nodes
    h = group.hosts[0]
    h.run("true")
    assert (
        h.connection().transport.packetizer._Packetizer__keepalive_interval == 15
    )  # paramiko keeps it private


def test_nodes_resolving_different_commits_are_refused_before_any_change(nodes, tmp_path):
    """Each node's cache (same path, private disk) names a different commit for `main`: the preflight names
    every node with its commit and no node is changed."""
    group, dst = nodes
    other = "fedcba9876543210fedcba9876543210fedcba98"
    make_cache(tmp_path / "a" / "hub")
    make_cache(tmp_path / "b" / "hub", commit=other)  # the same files under another commit
    cache = f"{os.path.dirname(dst)}/hub"
    for i, h in enumerate(group):
        src = tmp_path / ("a" if i < 2 else "b") / "hub"
        h.run(["sh", "-c", 'mkdir -p "$2" && cp -a "$1/." "$2/"', "sh", str(src), cache]).check("copy cache")
    plan = plan_for(tmp_path, Path(cache), dst, list(ADDRESSES))
    with pytest.raises(NodeError) as e:
        stage(plan, group, progress=False)
    assert "different commits" in str(e.value) and "nothing was changed" in str(e.value)
    assert set(e.value.failures) == set(ADDRESSES)
    for i, addr in enumerate(ADDRESSES):
        assert (COMMIT if i < 2 else other) in e.value.failures[addr]
    for h in group:
        assert h.run(["test", "-e", dst]).exit_code == 1, h.name


# ---- issue 17: blob names, other people's files, deep verification ------------------------------------------


def remote_sha256(host, path: str) -> str:
    code = (
        "import hashlib, json, sys; h = hashlib.sha256(); f = open(sys.argv[1], 'rb')\n"
        "for b in iter(lambda: f.read(1 << 20), b''): h.update(b)\n"
        "print(json.dumps(h.hexdigest()))"
    )
    r = host.run(["python3", "-c", code, path])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_a_shard_with_a_new_blob_in_a_new_revision_is_copied_again_on_every_node(nodes, tmp_path):
    """refs/main moves to a commit where one shard has the same size and sampled blocks but a new blob: every
    node copies that shard again (never adopts its old bytes) and keeps the unchanged one."""
    group, dst = nodes
    cache = tmp_path / "nas" / "hub"
    make_cache(cache)
    plan = plan_for(tmp_path, cache, dst, list(ADDRESSES))
    stage(plan, group, progress=False)
    changed = differ_between_samples(default_files()[LOCAL[0]])
    new_revision(cache, {LOCAL[0]: changed})
    report = stage(plan, group, progress=False)
    assert report.views[0].commit == COMMIT2
    for h in group:
        node = report.views[0].nodes[h.name]
        assert (node.copied, node.verified, node.adopted) == (1, 1, 0), h.name
        assert any(blob_name(changed) in r for r in node.repaired), node.repaired
        assert remote_sha256(h, f"{dst}/{LOCAL[0]}") == blob_name(changed), h.name
        manifest = remote_json(h, f"import json; print(open({dst + '/.labkit-view.json'!r}).read())")
        assert manifest["files"][LOCAL[0]]["blob"] == blob_name(changed)
    assert stage(plan, group, progress=False).verification_only


def test_deep_catches_a_same_size_copy_whose_sampled_blocks_match_on_one_node(nodes, tmp_path):
    """Bytes changed between the sampled blocks of one node's copy: the sampled stage cannot see it; --deep
    names both hashes and re-copies there only; the next deep stage takes every hash from the manifest."""
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    stage(plan, group, progress=False)
    victim, name = group.hosts[2], LOCAL[1]
    good = default_files()[name]
    bad = differ_between_samples(good, 4096)
    start, end = gap_between_samples(len(good))
    mid = start + (end - start - 4096) // 2  # where differ_between_samples inverts its 4096 bytes
    flip = (
        "import sys; f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2])); b = f.read(4096); "
        "f.seek(int(sys.argv[2])); f.write(bytes(x ^ 255 for x in b)); f.close()"
    )
    assert victim.run(["python3", "-c", flip, f"{dst}/{name}", str(mid)]).exit_code == 0
    assert remote_sha256(victim, f"{dst}/{name}") == hashlib.sha256(bad).hexdigest()
    assert stage(plan, group, progress=False).verification_only  # the sampled check's documented limit
    report = stage(plan, group, progress=False, deep=True)
    nodes_ = report.views[0].nodes
    assert nodes_[victim.name].copied == 1
    (note,) = nodes_[victim.name].repaired
    assert hashlib.sha256(bad).hexdigest() in note and blob_name(good) in note and name in note
    assert all(n.copied == 0 and n.verified == 2 for a, n in nodes_.items() if a != victim.name)
    assert all(set(n.verification.values()) == {"deep sha256"} for n in nodes_.values())
    assert remote_sha256(victim, f"{dst}/{name}") == blob_name(good)
    again = stage(plan, group, progress=False, deep=True)
    assert again.verification_only
    cached = "deep sha256 (cached, size+mtime+ctime unchanged)"
    assert all(set(n.verification.values()) == {cached} for n in again.views[0].nodes.values())


def test_a_users_file_on_one_node_refuses_the_stage_before_any_node_changes(nodes, tmp_path):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))
    owner = group.hosts[1]
    mine = 'mkdir -p "$1" && printf %s "$2" > "$1/config.json"'
    assert owner.run(["sh", "-c", mine, "sh", dst, '{"edited": true}']).exit_code == 0
    with pytest.raises(NodeError) as e:
        stage(plan, group, progress=False)
    assert set(e.value.failures) == {owner.name}
    assert f"{dst}/config.json" in e.value.failures[owner.name]
    assert "--replace-foreign config.json" in e.value.failures[owner.name]
    for h in group:
        if h is not owner:
            assert h.run(["test", "-e", os.path.dirname(dst)]).exit_code == 1, h.name
    listing = remote_json(owner, LIST_VIEW.format(dst=dst))
    assert list(listing) == ["config.json"] and listing["config.json"]["link"] is None
