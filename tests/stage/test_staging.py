"""Staging a local view against real files: an HF-layout cache in a temp dir, nodes run on this machine."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.errors import LabkitError, NodeError, RecipeError
from labkit.stage import check_view, preflight, preflight_table, stage
from labkit.stage.assess import MANIFEST_NAME
from labkit.stage.node import script as stage_node
from labkit.stage.space import StagingRefused
from labkit.stage.transport import Timeouts, call_node, node_command, parse_node_output
from tests.support.hf_cache import COMMIT, LOCAL, LocalNode, default_files, make_cache, plan_for, tree_state
from tests.support.staging import hanging_cache
from tests.support.staging import run_stage as run


def test_sample_offsets_cover_first_last_and_small_files():
    B = stage_node.SAMPLE_BLOCK
    big = 10**9
    offs = stage_node.sample_offsets(big)
    assert len(offs) == stage_node.SAMPLE_COUNT and offs[0] == 0 and offs[-1] == big - B
    assert offs == sorted(set(offs))
    assert stage_node.sample_offsets(3 * B + 5) == [0, B, 2 * B, 3 * B]  # small file: read whole
    assert stage_node.block_lengths(3 * B + 5, stage_node.sample_offsets(3 * B + 5))[-1] == 5
    assert stage_node.sample_offsets(0) == []


def test_first_stage_copies_local_files_and_links_the_rest(world):
    plan, snap, dst, hosts = world
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert (node.copied, node.adopted, node.verified) == (2, 0, 0)
    assert node.bytes_copied == sum(len(default_files()[n]) for n in LOCAL)
    files = default_files()
    for name in LOCAL:
        p = dst / name
        assert p.is_file() and not p.is_symlink()
        assert p.read_bytes() == files[name]
    for name in (
        "config.json",
        "model.safetensors.index.json",
        "model-00001-of-00003.safetensors",
        "original",
    ):
        p = dst / name
        assert p.is_symlink()
        assert os.readlink(p) == f"{snap}/{name}"  # absolute, into the shared cache
        assert os.path.isabs(os.readlink(p))
    assert (dst / "original" / "params.json").read_bytes() == files["original/params.json"]
    assert (dst / "model-00001-of-00003.safetensors").read_bytes() == files[
        "model-00001-of-00003.safetensors"
    ]
    assert not [p for p in dst.iterdir() if p.name.startswith(stage_node.PARTIAL_PREFIX)]
    manifest = json.loads((dst / ".labkit-view.json").read_text())
    assert manifest["commit"] == COMMIT and manifest["revision"] == "main"
    entry = manifest["files"][LOCAL[0]]
    assert entry["state"] == "copied" and entry["size"] == len(files[LOCAL[0]])
    assert len(entry["xxh3_64"]) == len(entry["offsets"]) == stage_node.SAMPLE_COUNT
    assert entry["source"] == f"{snap}/{LOCAL[0]}"
    assert set(manifest["links"]) == {
        "config.json",
        "model.safetensors.index.json",
        "model-00001-of-00003.safetensors",
        "original",
    }
    assert not report.verification_only
    assert check_view(plan, hosts) == {"n1": 4}


def test_second_stage_is_verification_only(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    before = tree_state(dst)
    hosts[0].calls.clear()
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert report.verification_only
    assert (node.copied, node.adopted, node.verified, node.linked, node.links_ok) == (0, 0, 2, 0, 4)
    assert tree_state(dst) == before  # not even the manifest was rewritten
    assert len(hosts[0].calls) == 1 and " probe " in hosts[0].calls[0]  # one read-only call


def test_hand_copied_tree_is_adopted_not_copied(world):
    plan, snap, dst, hosts = world
    dst.mkdir(parents=True)
    for name in LOCAL:  # as `rsync -L` or `cp -L` by hand would leave them
        shutil.copyfile(snap / name, dst / name)
    inodes = {n: (dst / n).stat().st_ino for n in LOCAL}
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert (node.copied, node.adopted, node.verified, node.bytes_copied) == (0, 2, 0, 0)
    assert {n: (dst / n).stat().st_ino for n in LOCAL} == inodes
    manifest = json.loads((dst / ".labkit-view.json").read_text())
    assert manifest["files"][LOCAL[0]]["state"] == "adopted"
    again = run(plan, hosts).views[0].nodes["n1"]
    assert (again.verified, again.adopted) == (2, 0)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("damage", ["truncated", "flipped-in-sample", "same-size-different", "link-instead"])
def test_damaged_copy_is_detected_and_recopied(world, damage):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    name = LOCAL[0]
    p = dst / name
    size = p.stat().st_size
    if damage == "truncated":
        os.truncate(p, size - 1000)
    elif damage == "flipped-in-sample":
        _flip(p, stage_node.sample_offsets(size)[7] + 123)
    elif damage == "same-size-different":
        p.write_bytes(os.urandom(size))
    else:
        p.unlink()
        p.symlink_to(snap / name)
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert (node.copied, node.verified) == (1, 1)
    assert len(node.repaired) == 1 and name in node.repaired[0] and "re-copying" in node.repaired[0]
    assert p.read_bytes() == default_files()[name] and not p.is_symlink()
    assert run(plan, hosts).verification_only


def test_flip_outside_samples_needs_full_mode(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    name = LOCAL[0]
    p = dst / name
    offs = stage_node.sample_offsets(p.stat().st_size)
    outside = offs[3] + stage_node.SAMPLE_BLOCK + 500  # between two sampled blocks
    assert outside < offs[4]
    _flip(p, outside)
    assert run(plan, hosts).verification_only  # documented limit of sampling
    report = run(plan, hosts, full=True)
    node = report.views[0].nodes["n1"]
    assert node.copied == 1 and "full hash" in node.repaired[0]
    assert p.read_bytes() == default_files()[name]
    manifest = json.loads((dst / ".labkit-view.json").read_text())
    assert manifest["files"][name]["full"].startswith("blake2b-512:")
    assert manifest["files"][LOCAL[1]]["full"].startswith("blake2b-512:")


def test_stale_partial_and_links_are_cleaned(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    (dst / (stage_node.PARTIAL_PREFIX + LOCAL[1])).write_bytes(b"x" * 5000)
    # A link of an older snapshot of this repo (into its cache folder): stale, removed.
    (dst / "old-shard.safetensors").symlink_to(f"{snap.parent}/{'f' * 40}/old-shard.safetensors")
    (dst / "config.json").unlink()
    (dst / "config.json").symlink_to("/elsewhere/config.json")
    (dst / "notes.txt").write_text("mine")
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert node.linked == 1
    assert not (dst / (stage_node.PARTIAL_PREFIX + LOCAL[1])).exists()
    assert not os.path.lexists(dst / "old-shard.safetensors")
    assert os.readlink(dst / "config.json") == f"{snap}/config.json"
    assert (dst / "notes.txt").read_text() == "mine"  # not ours: left, with a warning
    assert any("notes.txt" in w for w in node.warnings)


@pytest.mark.parametrize("leftover", ["partial", "stale-link"])
def test_a_run_that_only_removes_leftovers_is_not_verification_only(world, leftover):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    if leftover == "partial":
        (dst / (stage_node.PARTIAL_PREFIX + LOCAL[1])).write_bytes(b"x" * 5000)
    else:
        (dst / "old-shard.safetensors").symlink_to(f"{snap.parent}/{'f' * 40}/old-shard.safetensors")
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert (node.removed, node.copied, node.linked) == (1, 0, 0)
    assert not report.verification_only
    table = report.table()
    assert "removed" in table.splitlines()[1] and "verification only" not in table
    assert report.to_dict()["views"][0]["nodes"]["n1"]["removed"] == 1
    assert run(plan, hosts).verification_only


def test_links_in_a_folder_that_is_not_a_view_are_left_alone(world):
    """A mistyped dst (a folder of the user's own model links, no labkit manifest): staging adds the view's
    entries but deletes none of the user's links; each left link is reported."""
    plan, snap, dst, hosts = world
    dst.mkdir(parents=True)
    mine = {
        "other-model": "/data/models/other",
        "notes": "../notes.txt",
        "tiny-v2": f"{snap.parent.parent}-v2/snapshots/x",
    }
    for name, target in mine.items():
        (dst / name).symlink_to(target)
    stale = dst / "old-shard.safetensors"  # into this repo's cache folder: labkit's own kind of link
    stale.symlink_to(f"{snap.parent}/{'f' * 40}/old-shard.safetensors")
    node = run(plan, hosts).views[0].nodes["n1"]
    assert {n: os.readlink(dst / n) for n in mine} == mine
    assert not os.path.lexists(stale)
    for name in mine:
        assert any(f"{dst}/{name}" in w and "left in place" in w for w in node.warnings), name
    assert (dst / LOCAL[0]).is_file() and (dst / "config.json").is_symlink()


def test_links_a_view_manifest_lists_are_removed_when_stale(world):
    """Links the view's manifest lists are labkit's even when they point elsewhere (e.g. a moved cache)."""
    plan, snap, dst, hosts = world
    run(plan, hosts)
    manifest_path = dst / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["links"]["retired.json"] = "/old/cache/retired.json"
    manifest_path.write_text(json.dumps(manifest))
    (dst / "retired.json").symlink_to("/old/cache/retired.json")
    (dst / "users-link").symlink_to("/data/elsewhere")  # not listed, not into the cache: left
    node = run(plan, hosts).views[0].nodes["n1"]
    assert not os.path.lexists(dst / "retired.json")
    assert os.readlink(dst / "users-link") == "/data/elsewhere"
    assert any("users-link" in w and "left in place" in w for w in node.warnings)
    assert "retired.json" not in json.loads(manifest_path.read_text())["links"]


def test_a_manifest_whose_file_list_is_damaged_is_restaged_not_a_crash(world):
    """A view manifest of the right commit whose "files" is not a table (hand-edited, truncated): its entries
    are not trusted, the local files are checked against the source again and the view ends correct."""
    plan, snap, dst, hosts = world
    run(plan, hosts)
    (dst / LOCAL[0]).unlink()  # one copy missing, so the assessment looks at the manifest's file entries
    manifest_path = dst / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["files"] = None
    manifest_path.write_text(json.dumps(manifest))
    node = run(plan, hosts).views[0].nodes["n1"]
    assert node.copied == 1 and (dst / LOCAL[0]).is_file()
    assert isinstance(json.loads(manifest_path.read_text())["files"], dict)
    assert run(plan, hosts).verification_only


def test_revision_is_resolved_through_refs_and_missing_ref_names_node_and_path(tmp_path):
    cache = tmp_path / "hub"
    make_cache(cache, ref="release")
    dst = tmp_path / "view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"], revision="release")
    report = run(plan, [LocalNode("n1")])
    assert report.views[0].commit == COMMIT
    plan = plan_for(tmp_path / "b", cache, str(tmp_path / "view2"), ["n1"])  # revision main: no refs/main
    with pytest.raises(NodeError) as e:
        run(plan, [LocalNode("n1")])
    assert "n1" in str(e.value) and "refs/main" in str(e.value)
    assert not (tmp_path / "view2").exists()


def test_local_file_missing_from_snapshot_is_an_error(tmp_path):
    cache = tmp_path / "hub"
    make_cache(cache)
    plan = plan_for(tmp_path, cache, str(tmp_path / "v"), ["n1"], local=("model-00009-of-00009.safetensors",))
    with pytest.raises(NodeError, match="model-00009-of-00009.safetensors.*not in the snapshot"):
        run(plan, [LocalNode("n1")])
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize(
    "field,value,key",
    [
        ("dst", "/srv/models/../../etc", "staging[0].dst"),
        ("dst", "relative/view", "staging[0].dst"),
        ("dst", "/", "staging[0].dst"),
        ("local", ("../../etc/passwd",), "staging[0].local[0]"),
        ("local", ("sub/model.safetensors",), "staging[0].local[0]"),
        ("local", (".labkit-view.json",), "staging[0].local[0]"),
        ("repo", "../../etc", "staging[0].repo"),
        ("revision", "../main", "staging[0].revision"),
    ],
)
def test_bad_plan_is_refused_before_any_node_is_touched(world, field, value, key):
    plan, snap, dst, hosts = world
    bad = replace(plan, staging=(replace(plan.staging[0], **{field: value}),))
    with pytest.raises(RecipeError) as e:
        run(bad, hosts)
    assert e.value.key == key
    with pytest.raises(RecipeError):
        check_view(bad, hosts)
    assert hosts[0].calls == []


def test_node_script_refuses_traversal_itself(tmp_path):
    """Defence in depth: the node side rejects names with separators even if a controller sent them."""
    req = {
        "dst": str(tmp_path / "v"),
        "remove": ["../x"],
        "copy": [],
        "link": [],
        "block": 65536,
        "count": 16,
    }
    r = LocalNode("n1").run(node_command("build", req))
    assert r.exit_code == 2 and "bare file name" in r.stdout
    assert not (tmp_path / "v").exists() or not list((tmp_path / "v").iterdir())


def test_paths_with_spaces_and_quotes_survive_the_shell(tmp_path):
    cache = tmp_path / "n a s" / "hub"
    snap = make_cache(cache)
    dst = tmp_path / "it's a view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    run(plan, [LocalNode("n1")])
    assert (dst / LOCAL[0]).read_bytes() == (snap / LOCAL[0]).read_bytes()


def test_check_view_finds_broken_links(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    (dst / "config.json").unlink()
    (dst / "config.json").symlink_to(str(snap / "gone.json"))
    with pytest.raises(NodeError, match="config.json -> .*gone.json is broken"):
        check_view(plan, hosts)


# ---- real small filesystem: refusal when short --------------------------------------------------------------


# (small_fs, a 4 MiB tmpfs: tests/stage/conftest.py)


def test_short_node_is_refused_with_nothing_changed(tmp_path, small_fs):
    cache = tmp_path / "hub"
    make_cache(cache)
    (small_fs / "keep.txt").write_text("x")
    dst = small_fs / "views" / "tiny"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"], min_free="1M")  # 3.6 MB + 1 MB > 4 MiB
    before = tree_state(small_fs)
    with pytest.raises(StagingRefused) as e:
        run(plan, [LocalNode("n1")])
    msg = str(e.value)
    assert "refused before changing anything" in msg and "binding node n1" in msg
    assert "need" in msg and "free" in msg and "margin" in msg
    assert e.value.rows[0]["margin"] < 0
    assert tree_state(small_fs) == before
    # With min_free lowered it fits, and the copy lands on the small filesystem.
    plan = plan_for(tmp_path / "ok", cache, str(dst), ["n1"], min_free="100k")
    report = run(plan, [LocalNode("n1")])
    assert report.views[0].nodes["n1"].copied == 2


# ---- kill -9 during a copy ----------------------------------------------------------------------------------

KILL_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from labkit import stage as staging
from labkit.recipe import load_recipe
from tests.support.hf_cache import LocalNode
plan = load_recipe(Path({recipe!r})).resolve()
staging.stage(plan, [LocalNode("n1")], progress=False)
"""


def test_kill_9_during_copy_then_rerun_ends_correct(tmp_path):
    big = 192 * 1024 * 1024  # large enough that the copy is caught mid-way
    files = default_files()
    files[LOCAL[0]] = os.urandom(1024) * (big // 1024)
    cache = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path
    cache = Path(cache) / f"labkit-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        make_cache(cache / "hub", files)
        dst = cache / "view"
        plan = plan_for(tmp_path, cache / "hub", str(dst), ["n1"])
        child = subprocess.Popen(
            [sys.executable, "-c", KILL_CHILD.format(root=str(Path.cwd()), recipe=str(tmp_path / "recipe"))],
            start_new_session=True,
        )
        partial = dst / (stage_node.PARTIAL_PREFIX + LOCAL[0])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if partial.stat().st_size > 0:
                    break
            except FileNotFoundError:
                pass
            if child.poll() is not None:
                pytest.fail("the stage finished before it could be killed")
            time.sleep(0.0005)
        os.killpg(child.pid, 9)  # controller and node script together, mid-copy
        child.wait()
        assert partial.exists() and partial.stat().st_size < big
        assert not (dst / LOCAL[0]).exists()  # never a partial file under the final name
        report = run(plan, [LocalNode("n1")])
        node = report.views[0].nodes["n1"]
        assert node.copied == 2
        assert any("interrupted" in w for w in node.warnings)
        assert not partial.exists()
        assert (dst / LOCAL[0]).read_bytes() == files[LOCAL[0]]
        assert run(plan, [LocalNode("n1")]).verification_only
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# ---- pure parts ---------------------------------------------------------------------------------------------


def test_preflight_table_names_the_binding_node():
    rows = [
        {
            "node": "dgx5",
            "filesystem": "/home",
            "need": 213 * 10**9,
            "free": 400 * 10**9,
            "reclaim": 0,
            "margin": 187 * 10**9,
            "binding": False,
        },
        {
            "node": "dgx7",
            "filesystem": "/home",
            "need": 213 * 10**9,
            "free": 200 * 10**9,
            "reclaim": 0,
            "margin": -13 * 10**9,
            "binding": True,
        },
    ]
    text = preflight_table(rows)
    assert "dgx7" in text and "SHORT binding" in text and "-13.0 GB" in text


def test_node_errors_come_back_as_labkit_errors():
    with pytest.raises(LabkitError, match="n1: staging probe: boom"):
        parse_node_output("n1", "probe", '{"event": "error", "message": "boom"}\n', "", 2)
    with pytest.raises(LabkitError, match="exit 127.*python3: not found"):
        parse_node_output("n1", "probe", "", "sh: python3: not found", 127)


# ---- with labkit.nodes.LocalHost, progress, serving integration ---------------------------------------------


def test_stage_with_hosts_localhost_streams_copy_progress(tmp_path):
    from labkit.nodes.local import LocalHost

    files = default_files()
    files[LOCAL[0]] = os.urandom(1024 * 1024) * 24  # 24 MiB: a few progress lines
    cache = tmp_path / "hub"
    snap = make_cache(cache, files)
    dst = tmp_path / "view"
    host = LocalHost("n1")
    request = {
        "dst": str(dst),
        "remove": [],
        "link": [],
        "block": stage_node.SAMPLE_BLOCK,
        "count": stage_node.SAMPLE_COUNT,
        "copy": [{"name": LOCAL[0], "src": f"{snap}/{LOCAL[0]}", "size": len(files[LOCAL[0]])}],
    }
    events = []
    result = call_node(host, "build", request, on_event=events.append)
    assert [c["name"] for c in result["copied"]] == [LOCAL[0]]
    assert events[0]["done"] == 0 and events[-1]["done"] == events[-1]["total"] == len(files[LOCAL[0]])
    assert (dst / LOCAL[0]).read_bytes() == files[LOCAL[0]]
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    report = stage(plan, [host], progress=False)
    node = report.views[0].nodes["n1"]
    assert (node.adopted, node.copied) == (1, 1)  # the file built above is adopted
    json.dumps(report.to_dict())  # serialisable for run records
    assert "n1" in report.table()


def test_localhost_run_streaming_delivers_lines_live_and_times_out():
    from labkit.nodes import CommandTimeout
    from labkit.nodes.local import LocalHost

    seen = []
    t0 = time.monotonic()
    r = LocalHost().run_streaming(
        "echo one; sleep 0.5; echo two", on_line=lambda line: seen.append((line, time.monotonic() - t0))
    )
    assert r.exit_code == 0 and r.stdout == "one\ntwo\n"
    assert [s[0] for s in seen] == ["one", "two"] and seen[0][1] < seen[1][1] - 0.3
    with pytest.raises(CommandTimeout):
        LocalHost().run_streaming("sleep 5", timeout=0.3, on_line=lambda line: None)


def test_view_links_resolve_in_the_container_mounts(tmp_path):
    """The docker plan mounts the view at its mount point and the shared cache at the same path, so the
    absolute link targets written by stage resolve inside the container; the model path is the view."""
    from labkit.recipe.lookup import load_plan

    plan = load_plan("dsv41", staging="local-view")
    view = plan.view
    assert plan.model_path == view.mount == "/root/.cache/hf-view"
    assert (view.dst, view.mount) in plan.mounts()
    assert (plan.cluster.shared_cache, plan.cluster.shared_cache) in plan.mounts()
    # A real stage: every link target lies under the (same-path mounted) shared cache.
    cache = tmp_path / "hub"
    make_cache(cache)
    dst = tmp_path / "view"
    local_plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    stage(local_plan, [LocalNode("n1")], progress=False)
    links = [p for p in dst.iterdir() if p.is_symlink()]
    assert links and all(os.readlink(p).startswith(str(cache) + "/") for p in links)


def test_copy_that_runs_out_of_space_leaves_no_partial(tmp_path, small_fs):
    cache = tmp_path / "hub"
    files = default_files()
    files[LOCAL[0]] = os.urandom(6 * 1024 * 1024)  # bigger than the 4 MiB filesystem
    snap = make_cache(cache, files)
    dst = small_fs / "view"
    request = {
        "dst": str(dst),
        "remove": [],
        "link": [],
        "block": stage_node.SAMPLE_BLOCK,
        "count": stage_node.SAMPLE_COUNT,
        "copy": [{"name": LOCAL[0], "src": f"{snap}/{LOCAL[0]}", "size": len(files[LOCAL[0]])}],
    }
    with pytest.raises(LabkitError, match="n1: staging build: .*no space left"):
        call_node(LocalNode("n1"), "build", request)
    assert list(dst.iterdir()) == []


def test_cli_stage_on_localhost(tmp_path):
    from labkit.cli import main

    cache = tmp_path / "hub"
    make_cache(cache)
    dst = tmp_path / "view"
    folder = tmp_path / "recipe"
    plan_for(tmp_path, cache, str(dst), ["localhost"])  # writes tmp_path/recipe/recipe.toml
    recipe = str(folder / "recipe.toml")
    assert main(["stage", recipe, "--dry-run"]) == 0
    assert not dst.exists()
    assert main(["stage", recipe]) == 0
    assert (dst / LOCAL[0]).is_file() and (dst / "config.json").is_symlink()
    assert main(["stage", recipe, "--full"]) == 0
    assert json.loads((dst / ".labkit-view.json").read_text())["files"][LOCAL[0]]["full"].startswith(
        "blake2b"
    )
    assert main(["stage", "sim"]) == 1  # no staging entry: a clear error, exit 1


def test_dst_may_be_a_link_to_a_directory_but_not_a_file(tmp_path):
    cache = tmp_path / "hub"
    make_cache(cache)
    (tmp_path / "big-disk" / "view").mkdir(parents=True)
    (tmp_path / "view").symlink_to(tmp_path / "big-disk" / "view")
    plan = plan_for(tmp_path, cache, str(tmp_path / "view"), ["n1"])
    assert run(plan, [LocalNode("n1")]).views[0].nodes["n1"].copied == 2
    assert (tmp_path / "big-disk" / "view" / LOCAL[0]).is_file()
    (tmp_path / "file-view").write_text("not a dir")
    plan = plan_for(tmp_path / "b", cache, str(tmp_path / "file-view"), ["n1"])
    with pytest.raises(NodeError, match="file-view exists and is not a directory"):
        run(plan, [LocalNode("n1")])


@pytest.mark.parametrize("method", ["copy_file_range", "sendfile", "read/write"])
def test_every_copy_method_makes_an_exact_copy(tmp_path, method):
    files = default_files()
    data = os.urandom(40 * 1024 * 1024 + 12345)  # > one 16 MiB read/write buffer, odd tail
    files[LOCAL[0]] = data
    snap = make_cache(tmp_path / "hub", files)
    dst = tmp_path / "view"
    request = {
        "dst": str(dst),
        "remove": [],
        "link": [],
        "block": stage_node.SAMPLE_BLOCK,
        "count": stage_node.SAMPLE_COUNT,
        "method": method,
        "copy": [{"name": LOCAL[0], "src": f"{snap}/{LOCAL[0]}", "size": len(data)}],
    }
    result = call_node(LocalNode("n1"), "build", request)
    assert result["copied"][0]["method"] == method
    assert (dst / LOCAL[0]).read_bytes() == data


def _two_views(tmp_path, small_fs, min_free_a: str, min_free_b: str):
    """A plan with two views on the 4 MiB tmpfs: a holds LOCAL[0] (2.1 MB), b LOCAL[1] (1.5 MB)."""
    from labkit.recipe import load_recipe
    from tests.support.hf_cache import write_recipe

    cache = tmp_path / "hub"
    make_cache(cache)
    folder = write_recipe(
        tmp_path / "recipe", cache, str(small_fs / "a"), ["n1"], local=LOCAL[:1], min_free=min_free_a
    )
    text = (folder / "recipe.toml").read_text()
    second = (
        text[text.index("[[staging]]") :]
        .replace(str(small_fs / "a"), str(small_fs / "b"))
        .replace(LOCAL[0], LOCAL[1])
        .replace(f'min_free = "{min_free_a}"', f'min_free = "{min_free_b}"')
    )
    (folder / "recipe.toml").write_text(text + "\n" + second)
    plan = load_recipe(folder).resolve()
    assert len(plan.staging) == 2
    return plan


def test_two_views_on_one_filesystem_share_its_free_space(tmp_path, small_fs):
    plan = _two_views(tmp_path, small_fs, "700k", "700k")
    # Alone each fits (2.8 MB and 2.2 MB of 4.19 MB); together 3.6 MB of copies + 0.7 MB min_free do not.
    with pytest.raises(StagingRefused, match="binding node n1") as e:
        run(plan, [LocalNode("n1")])
    assert e.value.rows[0]["need"] == 3_600_000 + 700_000
    assert list(small_fs.iterdir()) == []
    one = replace(plan, staging=plan.staging[:1])
    assert run(one, [LocalNode("n1")]).views[0].nodes["n1"].copied == 1


def test_min_free_counts_once_per_filesystem(tmp_path, small_fs):
    """min_free is what must stay free on the filesystem, not per view: two views that fit with the largest
    min_free counted once (3.6 MB + 0.5 MB of 4.19 MB) are staged, not refused (0.7 MB counted twice)."""
    plan = _two_views(tmp_path, small_fs, "500k", "200k")
    rows = preflight(plan, [LocalNode("n1")])
    assert [r[0]["need"] for r in rows] == [3_600_000 + 500_000] * 2
    report = run(plan, [LocalNode("n1")])
    assert [v.nodes["n1"].copied for v in report.views] == [1, 1]


def test_a_hung_probe_fails_naming_the_node_within_its_timeout(tmp_path):
    from labkit.nodes.local import LocalHost

    hanging_cache(tmp_path / "hub")
    dst = tmp_path / "view"
    plan = plan_for(tmp_path, tmp_path / "hub", str(dst), ["n1"])
    t0 = time.monotonic()
    with pytest.raises(NodeError) as e:
        stage(plan, [LocalHost("n1")], progress=False, timeouts=Timeouts(node=1.0))
    assert time.monotonic() - t0 < 10
    assert set(e.value.failures) == {"n1"} and "probe timed out after 1 s" in e.value.failures["n1"]
    assert "nothing was changed" in str(e.value) and not dst.exists()
    with pytest.raises(NodeError, match="n1: staging probe timed out"):
        preflight(plan, [LocalHost("n1")], timeouts=Timeouts(node=1.0))


class TimedHost:
    """A real local host that records the timeout given to each node-script op."""

    def __init__(self, name: str):
        from labkit.nodes.local import LocalHost

        self.name = name
        self.host = LocalHost(name)
        self.timeouts: list[tuple[str, float | None]] = []

    def _note(self, cmd, timeout):
        self.timeouts.append((shlex.split(cmd)[5], timeout))

    def run(self, cmd, timeout=None, stdin=None):
        self._note(cmd, timeout)
        return self.host.run(cmd, timeout=timeout, stdin=stdin)

    def run_streaming(self, cmd, timeout=None, stdin=None, on_line=None):
        self._note(cmd, timeout)
        return self.host.run_streaming(cmd, timeout=timeout, stdin=stdin, on_line=on_line)


@pytest.mark.parametrize("full", [False, True])
def test_every_node_op_has_a_timeout_and_build_scales_with_the_bytes(world, full):
    plan, snap, dst, _ = world
    host = TimedHost("n1")
    t = Timeouts(node=7.0, build_floor=30.0, rate=1e6)
    stage(plan, [host], progress=False, full=full, timeouts=t)
    check_view(plan, [host], timeouts=t)
    ops = dict(host.timeouts)
    local_bytes = sum(len(default_files()[n]) for n in LOCAL)
    # build copies the bytes once, and in full mode hashes copy and source again
    assert ops["build"] == pytest.approx(30.0 + local_bytes * (3 if full else 1) / 1e6)
    assert ops["write"] == ops["check"] == 7.0
    probes = [timeout for op, timeout in host.timeouts if op == "probe"]
    # full: the sampled probe, then one hashing the sources (no copies yet) whole, timed for their bytes;
    # after the build a sampled verification probe
    assert probes == ([7.0, pytest.approx(7.0 + local_bytes / 1e6), 7.0] if full else [7.0, 7.0])
    if full:  # a second run also hashes the copies now in the view
        host.timeouts.clear()
        stage(plan, [host], progress=False, full=True, timeouts=t)
        assert host.timeouts == [("probe", 7.0), ("probe", pytest.approx(7.0 + 2 * local_bytes / 1e6))]


def test_node_script_is_stdlib_only():
    """Nodes have python3 and nothing else: the script may import only the standard library."""
    import ast

    from labkit.stage.transport import node_script

    tree = ast.parse(node_script())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and names <= set(sys.stdlib_module_names)


def test_a_node_runs_the_script_file_as_it_reads():
    """What a node runs is the file a reader opens and the controller imports, byte for byte, after the
    job's mark: nothing is joined or dropped on the way."""
    from labkit.stage.transport import node_script

    text = Path(stage_node.__file__).read_text(encoding="utf-8")
    assert node_script() == text
    words = shlex.split(node_command("check", {"dst": "/v"}, mark="labkit-stage-job=abc"))
    assert words[:4] == ["python3", "-I", "-S", "-c"] and words[5:] == ["check", '{"dst":"/v"}']
    assert words[4] == "# labkit-stage-job=abc\n" + text


def test_a_directory_in_the_way_is_refused_at_preflight(world):
    plan, snap, dst, hosts = world
    (dst / LOCAL[0]).mkdir(parents=True)
    (dst / "config.json").mkdir()
    before = tree_state(dst)
    with pytest.raises(NodeError, match="is a directory where the view needs a copy"):
        run(plan, hosts)
    assert tree_state(dst) == before


def test_full_preflight_moves_the_raw_source_samples_once(world):
    """Full mode probes twice (sizes, then whole-file hashes): only the second returns raw sampled blocks."""
    plan, snap, dst, hosts = world
    sent: list[dict] = []

    class Recording:
        def __init__(self, host):
            self.host, self.name = host, host.name

        def run(self, cmd, timeout=None, stdin=None):
            words = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
            if "probe" in words:
                sent.append(json.loads(words[words.index("probe") + 1]))
            return self.host.run(cmd, timeout=timeout, stdin=stdin)

    preflight(plan, [Recording(h) for h in hosts], full=True)
    assert [bool(r["full"]) for r in sent] == [False, True]
    assert sent[0]["send_source"] == [] and sent[1]["send_source"] == list(LOCAL)


def test_node_script_is_never_parsed_by_two_threads_at_once(monkeypatch):
    """CPython 3.11's AST converter shares its recursion counter between threads: concurrent parses failed a
    four-node stage with "AST constructor recursion depth mismatch" when the script was joined from modules by
    parsing them. Each node's thread builds its command, so building it parses nothing at all."""
    import ast
    import threading

    from labkit.stage.transport import node_script

    def no_parse(*args, **kwargs):
        raise AssertionError("node_script parsed Python")

    monkeypatch.setattr(ast, "parse", no_parse)
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(node_script())) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 4 and len(set(got)) == 1


def _resident_pages(path: Path) -> int:
    """Pages of `path` in the page cache, as util-linux's fincore counts them."""
    out = subprocess.run(["fincore", "--noheadings", "--raw", "-o", "PAGES", str(path)], capture_output=True)
    return int(out.stdout.decode().split()[0])


@pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore is not installed")
def test_a_copy_and_its_source_leave_no_page_cache_behind(world):
    """The node drops the page cache of each copy and its source once the copy is checked (posix_fadvise, no
    root), and the report says how much; on a filesystem with a page cache (tmp_path, not a tmpfs)."""
    plan, snap, dst, hosts = world
    big = LOCAL[0]
    (snap / big).unlink()  # a larger local file, resident in the page cache before the stage
    (snap / big).write_bytes(os.urandom(4 << 20))
    assert _resident_pages(snap / big) > 0
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert node.copied == 2 and node.cache_dropped == node.bytes_copied > 4 << 20
    assert _resident_pages(dst / big) == 0 and _resident_pages(snap / big) == 0
    assert "page cache dropped after copying (copies and their NAS sources): n1 " in report.table()
