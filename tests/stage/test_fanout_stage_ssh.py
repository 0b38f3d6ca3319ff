"""stage() with the fan-out wired in (docs/fanout.md, "Running it"), on the four sshd nodes (docs/test-nodes.md):
each shard read from the NAS once and a verified view on every node, the same as independent copies give;
`fanout = false` keeps the independent copies; a second stage is verification only."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from labkit.recipe import load_recipe
from labkit.stage import run as stage_run
from labkit.stage import stage
from labkit.stage.assess import MANIFEST_NAME
from tests.stage.test_fanout_ssh import FifoNas, assert_copies
from tests.support.hf_cache import LOCAL, blob_name, default_files, make_cache, write_recipe
from tests.support.nodes import ADDRESSES
from tests.support.staging import LIST_VIEW, remote_json


def recipe(tmp_path: Path, dst: str, extra: str = "", folder: str = "recipe", **kw):
    """A local-view plan for the four nodes; `extra` lines are added to its [[staging]] entry (the last table)."""
    path = write_recipe(tmp_path / folder, tmp_path / "nas" / "hub", dst, list(ADDRESSES), **kw)
    with open(path / "recipe.toml", "a", encoding="utf-8") as f:
        f.write(extra)
    return load_recipe(path).resolve()


class CountingFanOut:
    """Wraps the fan_out stage() calls: for its duration each hot shard's blob in the shared cache is a FIFO
    that counts its opens (FifoNas), so every NAS read is seen; the blobs are put back as files afterwards
    (the probes before and after read sampled blocks, which a FIFO cannot give)."""

    def __init__(self, snap: Path, files: dict[str, bytes]):
        self.snap, self.files, self.opens, self.reports = snap, files, [], []
        self.real = stage_run.fan_out

    def __call__(self, *args, **kw):
        nas = FifoNas(self.snap, {n: self.files[n] for n in LOCAL})
        try:
            report = self.real(*args, **kw)
        finally:
            nas.close()
            for name, path in nas.paths.items():
                path.unlink()
                path.write_bytes(self.files[name])
        self.opens.append(nas.opens)
        self.reports.append(report)
        return report


def no_fan_out(*args, **kw):
    raise AssertionError("fan_out was called")


def manifest_of(host, dst: str) -> dict:
    """The view's manifest without what differs between two stages of the same files (times, the path)."""
    r = host.run(["cat", f"{dst}/{MANIFEST_NAME}"])
    assert r.exit_code == 0, r.stderr
    m = json.loads(r.stdout)
    for entry in [*m["files"].values(), *m["kept"].values()]:
        entry.pop("at", None)
    return {k: v for k, v in m.items() if k not in ("updated", "dst")}


def test_fanout_stage_reads_each_shard_once_and_matches_independent_copies(nodes, tmp_path, monkeypatch):
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    plan = recipe(tmp_path, dst)  # no `fanout` key: on, the lane has four nodes
    counting = CountingFanOut(snap, files)
    monkeypatch.setattr(stage_run, "fan_out", counting)
    report = stage(plan, group, progress=False)
    assert counting.opens == [{LOCAL[0]: 1, LOCAL[1]: 1}]  # one fan-out, each blob opened once in all
    (fanned,) = counting.reports
    view = report.views[0]
    assert view.fanout["nas_reads"] == fanned.nas_reads() and len(view.fanout["chains"]) == len(LOCAL)
    # the staging record says what every file's copies were checked against, and nobody knocked
    assert view.fanout["trust"] == dict.fromkeys(LOCAL, "sha256 = blob name, checked by every receiver")
    assert (view.fanout["refused"], view.fanout["wrong_tokens"]) == ({}, 0)
    assert_copies(group, dst, files)
    record = report.to_dict()["views"][0]["nodes"]
    by = {(f.node, f.name): f for f in fanned.files}
    for addr, node in view.nodes.items():
        assert (node.copied, node.adopted, node.verified, node.linked) == (2, 0, 0, 4), addr
        assert node.bytes_copied == sum(len(files[n]) for n in LOCAL) and node.methods == ["fan-out"]
        for name in LOCAL:
            f = by[addr, name]
            assert record[addr]["sources"][name] == f.source  # "nas" or the peer it came from
            # the expected digest was passed with the request (the blob name), not looked up on the node
            assert f.verified == "sha256 = blob name" and f.sha256 == blob_name(files[name])
            assert record[addr]["verification"][name] == (
                f"sampled xxh3 8 blocks (on receipt from {f.source}: sha256 = blob name)"
            )
        listing = remote_json(group.hosts[ADDRESSES.index(addr)], LIST_VIEW.format(dst=dst))
        assert listing["config.json"]["link"] == f"{snap}/config.json" and listing["config.json"]["ok"]
    assert {r["sources"][n] for r in record.values() for n in LOCAL} > {"nas"}  # some came over the fabric
    # the same view made with independent copies: the same manifest, times aside
    other = f"{os.path.dirname(dst)}/dsv-independent"
    off = recipe(tmp_path, other, "fanout = false\n", folder="off")
    monkeypatch.setattr(stage_run, "fan_out", no_fan_out)
    independent = stage(off, group, progress=False)
    for h in group:
        assert manifest_of(h, dst) == manifest_of(h, other), h.name
        assert independent.views[0].nodes[h.name].sources == dict.fromkeys(LOCAL, "nas")
    # a second stage of the fanned view: verification only
    again = stage(plan, group, progress=False)
    assert again.verification_only
    assert all(n.verified == 2 for n in again.views[0].nodes.values())


def test_fanout_false_keeps_the_independent_copies(nodes, tmp_path, monkeypatch):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = recipe(tmp_path, dst, "fanout = false\n")
    assert plan.staging[0].fanout is False
    monkeypatch.setattr(stage_run, "fan_out", no_fan_out)
    report = stage(plan, group, progress=False)
    view = report.views[0]
    assert view.fanout is None
    for addr, node in view.nodes.items():
        assert (node.copied, node.linked) == (2, 4), addr
        assert node.sources == dict.fromkeys(LOCAL, "nas") and "fan-out" not in node.methods
        assert node.verification == dict.fromkeys(LOCAL, "sampled xxh3 8 blocks")
    assert stage(plan, group, progress=False).verification_only


def test_a_deep_fanout_stage_records_the_hash_checked_on_receipt(nodes, tmp_path, monkeypatch):
    """verify = "deep": the SHA-256 a pull checked against the blob name is the file's deep record, so the
    next deep stage takes it without hashing and writes nothing."""
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    plan = recipe(tmp_path, dst, verify="deep")
    monkeypatch.setattr(stage_run, "fan_out", CountingFanOut(snap, files))
    report = stage(plan, group, progress=False)
    for addr, node in report.views[0].nodes.items():
        assert node.copied == 2 and node.methods == ["fan-out"], addr
        assert all(node.verification[n].startswith("deep sha256 (on receipt from ") for n in LOCAL)
    for h in group:
        m = manifest_of(h, dst)
        assert {n: m["files"][n]["deep"]["sha256"] for n in LOCAL} == {n: blob_name(files[n]) for n in LOCAL}
    again = stage(plan, group, progress=False)
    assert again.verification_only
    cached = "deep sha256 (cached, size+mtime+ctime unchanged)"
    assert all(n.verification == dict.fromkeys(LOCAL, cached) for n in again.views[0].nodes.values())


def test_the_fanout_key_must_be_a_boolean(tmp_path):
    with pytest.raises(Exception, match=r"staging.*fanout"):
        recipe(tmp_path, "/tmp/x/view", 'fanout = "yes"\n')
    shutil.rmtree(tmp_path / "recipe")
    assert recipe(tmp_path, "/tmp/x/view").staging[0].fanout is None
    shutil.rmtree(tmp_path / "recipe")
    assert recipe(tmp_path, "/tmp/x/view", "fanout = true\n").staging[0].fanout is True


def test_damaged_copies_on_two_nodes_are_pulled_from_the_nodes_holding_them(nodes, tmp_path, monkeypatch):
    """A repair on two nodes: the damaged copies are removed first, then pulled from the nodes that still
    hold a verified one; nothing is read from the NAS, and a re-copied file counts as copied, not removed."""
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    plan = recipe(tmp_path, dst)
    stage(plan, group, progress=False)
    victims = [h.name for h in group.hosts[1:3]]
    for h in group.hosts[1:3]:
        assert h.run(["truncate", "-s", "1000", f"{dst}/{LOCAL[1]}"]).exit_code == 0
    counting = CountingFanOut(snap, files)
    monkeypatch.setattr(stage_run, "fan_out", counting)
    report = stage(plan, group, progress=False)
    assert counting.opens == [{LOCAL[0]: 0, LOCAL[1]: 0}]
    for addr, node in report.views[0].nodes.items():
        if addr in victims:
            assert (node.copied, node.verified, node.removed) == (1, 1, 0), addr
            assert node.sources[LOCAL[1]] != "nas" and node.repaired, addr
        else:
            assert (node.copied, node.verified, node.sources) == (0, 2, {}), addr
    assert_copies(group, dst, files)
    assert stage(plan, group, progress=False).verification_only
