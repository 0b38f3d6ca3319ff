"""What a view may trust and what it must leave alone (issue 17, item 0), against real files on this machine:
a shard whose blob changed in a new revision is copied again, never adopted; a file labkit did not make is
never replaced or removed unless it is named with --replace-foreign; a tree copied by hand (subfolders
included) is adopted; the texts about sampling say what the code does; a full disk names file, node, sizes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from labkit.errors import LabkitError, NodeError
from labkit.stage import check_view
from labkit.stage.assess import MANIFEST_NAME
from labkit.stage.node.script import SAMPLE_COUNT
from tests.support.hf_cache import (
    COMMIT2,
    LOCAL,
    LocalNode,
    blob_name,
    default_files,
    make_cache,
    new_revision,
    payload,
    plan_for,
    tree_state,
)
from tests.support.staging import differ_between_samples
from tests.support.staging import run_stage as run

REPO_ROOT = Path(__file__).resolve().parents[2]


def manifest_of(dst: Path) -> dict:
    return json.loads((dst / MANIFEST_NAME).read_text())


def only_probes(host: LocalNode) -> bool:
    return bool(host.calls) and all(shlex.split(c)[5] == "probe" for c in host.calls)


# ---- a: a new blob is a new copy -----------------------------------------------------------------------------


def test_a_shard_with_a_new_blob_in_a_new_revision_is_copied_not_adopted(world):
    """refs/main moves to a commit where one shard has the same size and the same sampled blocks but a new
    blob: the view's copy of the old blob is replaced; the unchanged shard (same blob) stays verified."""
    plan, snap, dst, hosts = world
    run(plan, hosts)
    changed = differ_between_samples(default_files()[LOCAL[0]])
    new_revision(snap.parents[2], {LOCAL[0]: changed})
    report = run(plan, hosts)
    view, node = report.views[0], report.views[0].nodes["n1"]
    assert view.commit == COMMIT2
    assert (node.copied, node.verified, node.adopted) == (1, 1, 0)
    assert (dst / LOCAL[0]).read_bytes() == changed
    assert any(LOCAL[0] in r and blob_name(changed) in r for r in node.repaired), node.repaired
    manifest = manifest_of(dst)
    assert manifest["commit"] == COMMIT2
    assert manifest["files"][LOCAL[0]]["blob"] == blob_name(changed)
    assert manifest["files"][LOCAL[0]]["state"] == "copied"
    assert manifest["files"][LOCAL[1]]["blob"] == blob_name(default_files()[LOCAL[1]])
    # every snapshot entry's blob is on record, the subfolder's files too
    assert manifest["blobs"]["original/params.json"] == blob_name(default_files()["original/params.json"])
    assert run(plan, hosts).verification_only


def test_a_view_from_before_blob_names_were_recorded_is_judged_by_its_old_source(world):
    """A manifest without blob names (an older labkit): the blob of each copy is read from the snapshot the
    manifest names as its source, so a revision change still re-copies exactly the changed shard."""
    plan, snap, dst, hosts = world
    run(plan, hosts)
    manifest = manifest_of(dst)
    for entry in manifest["files"].values():
        del entry["blob"]
    manifest.pop("blobs")
    (dst / MANIFEST_NAME).write_text(json.dumps(manifest))
    changed = differ_between_samples(default_files()[LOCAL[0]])
    new_revision(snap.parents[2], {LOCAL[0]: changed})
    node = run(plan, hosts).views[0].nodes["n1"]
    assert (node.copied, node.verified) == (1, 1)
    assert (dst / LOCAL[0]).read_bytes() == changed


# ---- b: nothing of the user's is replaced unless named ---------------------------------------------------------


def test_an_edited_file_in_a_folder_that_is_not_a_view_is_not_replaced_unless_named(world):
    plan, snap, dst, hosts = world
    dst.mkdir(parents=True)
    edited = b'{"model_type": "tiny", "rope_scaling": "mine"}\n'
    (dst / "config.json").write_bytes(edited)
    before = tree_state(dst)
    with pytest.raises(NodeError) as e:
        run(plan, hosts)
    why = e.value.failures["n1"]
    assert f"{dst}/config.json" in why and "--replace-foreign config.json" in why, why
    assert "nothing was changed" in str(e.value)
    assert tree_state(dst) == before and only_probes(hosts[0])
    report = run(plan, hosts, replace_foreign=["config.json"])
    node = report.views[0].nodes["n1"]
    assert os.readlink(dst / "config.json") == f"{snap}/config.json"
    assert any(f"{dst}/config.json" in w and "--replace-foreign" in w for w in node.warnings), node.warnings
    assert run(plan, hosts).verification_only


def test_a_users_own_shard_of_the_same_name_is_not_deleted_to_copy_over_it(world):
    """A mistyped dst pointing at the user's own model folder: its shard of the same name is someone else's
    data, not a broken copy, so it is not removed and re-copied."""
    plan, snap, dst, hosts = world
    dst.mkdir(parents=True)
    (dst / LOCAL[0]).write_bytes(os.urandom(700_000))
    (dst / "notes.txt").write_text("mine")
    before = tree_state(dst)
    with pytest.raises(NodeError) as e:
        run(plan, hosts)
    why = e.value.failures["n1"]
    assert f"{dst}/{LOCAL[0]}" in why and f"--replace-foreign {LOCAL[0]}" in why, why
    assert tree_state(dst) == before and only_probes(hosts[0])


def test_every_foreign_entry_is_named_in_the_report(world):
    """In a folder without a labkit manifest: the user's link at a view name is replaced (a link, not data)
    and said so; the user's other file and link are left and said so."""
    plan, snap, dst, hosts = world
    dst.mkdir(parents=True)
    (dst / "config.json").symlink_to("/data/mine/config.json")
    (dst / "notes.txt").write_text("mine")
    (dst / "other-model").symlink_to("/data/models/other")
    node = run(plan, hosts).views[0].nodes["n1"]
    notes = node.warnings + node.repaired
    for name in ("config.json", "notes.txt", "other-model"):
        assert any(f"{dst}/{name}" in n for n in notes), (name, notes)
    assert any("config.json" in n and "/data/mine/config.json" in n for n in notes)
    assert (dst / "notes.txt").read_text() == "mine"


def test_names_given_to_replace_foreign_are_checked_before_any_node_is_touched(world):
    plan, snap, dst, hosts = world
    with pytest.raises(LabkitError, match=r"replace-foreign.*\.\./x"):
        run(plan, hosts, replace_foreign=["../x"])
    assert hosts[0].calls == []


# ---- c: hand-made trees ------------------------------------------------------------------------------------


def test_a_hand_made_copy_of_a_snapshot_with_a_subfolder_is_adopted(world):
    """`rsync -aL snapshot/ dst/` leaves regular files and the `original/` folder: every file is checked like an
    adopted copy and kept as it is (nothing is replaced); later stages only verify."""
    plan, snap, dst, hosts = world
    shutil.copytree(snap, dst)  # follows the links, as rsync -L or cp -rL would
    before = tree_state(dst)
    report = run(plan, hosts)
    node = report.views[0].nodes["n1"]
    assert (node.copied, node.adopted, node.bytes_copied, node.linked) == (0, 2, 0, 0)
    kept = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors"}
    kept.add("original/params.json")
    assert node.kept == len(kept)
    assert set(node.verification) == kept | set(LOCAL)
    after = tree_state(dst)
    after.pop(MANIFEST_NAME)
    assert after == before
    assert check_view(plan, hosts) == {"n1": 0}
    again = run(plan, hosts)
    assert again.verification_only and again.views[0].nodes["n1"].verified == 2


def test_a_hand_made_subfolder_that_differs_from_the_snapshot_is_refused_naming_the_file(world):
    plan, snap, dst, hosts = world
    shutil.copytree(snap, dst)
    (dst / "original" / "params.json").write_text('{"dim": 9}\n')
    before = tree_state(dst)
    with pytest.raises(NodeError) as e:
        run(plan, hosts)
    assert f"{dst}/original/params.json" in e.value.failures["n1"]
    assert tree_state(dst) == before


# ---- the small fixes ---------------------------------------------------------------------------------------


def _sampling_texts() -> list[tuple[str, str]]:
    """(where, text) of every text that describes the sampled check: labkit/stage docstrings and comments,
    the README's staging section, docs/staging.md, the manifest's own rule."""
    out = [
        (str(p.relative_to(REPO_ROOT)), p.read_text())
        for p in sorted((REPO_ROOT / "labkit/stage").rglob("*.py"))
    ]
    readme = (REPO_ROOT / "README.md").read_text()
    out.append(("README.md", readme[readme.index("## Staging") :].split("\n## ", 1)[0]))
    out.append(("docs/staging.md", (REPO_ROOT / "docs" / "staging.md").read_text()))
    return out


def test_every_text_about_sampling_says_what_the_code_does(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    rule = manifest_of(dst)["sampling"]["rule"]
    for path in re.findall(r"labkit/[\w/]+\.py", rule):
        assert (REPO_ROOT / path).is_file(), (
            f"the manifest's sampling rule names {path}, which does not exist"
        )
    words = {"eight": 8, "sixteen": 16, "six": 6}
    for where, text in [*_sampling_texts(), ("manifest rule", rule)]:
        flat = " ".join(text.split())
        for n in re.findall(r"\b(\d+|eight|sixteen) (?:sampled )?blocks\b", flat):
            assert int(words.get(n, n)) == SAMPLE_COUNT, f"{where} says {n} sampled blocks"
        for n in re.findall(r"\b(\d+|six) evenly spaced\b", flat):
            assert int(words.get(n, n)) == SAMPLE_COUNT - 2, f"{where} says {n} evenly spaced blocks"


class FillsTheDisk:
    """A local node whose disk fills up (ballast written) just before the build runs: the preflight saw room."""

    def __init__(self, name: str, fs: Path):
        self.name, self.node, self.fs = name, LocalNode(name), fs

    def run(self, cmd, timeout=None, stdin=None):
        return self.run_streaming(cmd, timeout=timeout, stdin=stdin)

    def run_streaming(self, cmd, timeout=None, stdin=None, on_line=None):
        if shlex.split(cmd)[5] == "build" and not (self.fs / "ballast").exists():
            st = os.statvfs(self.fs)
            with open(self.fs / "ballast", "wb") as f:
                f.write(b"\0" * (st.f_bavail * st.f_frsize - 1_000_000))  # leaves 1 MB
        return self.node.run_streaming(cmd, timeout=timeout, stdin=stdin, on_line=on_line)


def test_running_out_of_space_names_the_file_the_node_and_the_sizes(tmp_path, small_fs):
    cache = tmp_path / "hub"
    make_cache(cache)
    dst = small_fs / "view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    with pytest.raises(NodeError) as e:
        run(plan, [FillsTheDisk("n1", small_fs)])
    why = e.value.failures["n1"]
    name = LOCAL[0]
    size = len(default_files()[name])
    assert name in why and f"{size} bytes" in why and "free" in why and str(dst) in why, why
    assert "n1" in str(e.value)
    assert not [p for p in dst.iterdir() if p.name.startswith(".labkit-partial.")]


def test_a_kept_hand_made_copy_is_not_kept_across_a_new_blob(tmp_path):
    """A hand-made copy kept by an earlier stage, whose file gets a new blob in a new revision (same size,
    same sampled blocks): it is no copy of the snapshot's file any more, and it is not labkit's to replace."""
    name = "model-00001-of-00003.safetensors"
    files = {**default_files(), name: payload(1_000_000, 9)}  # larger than the 8 sampled blocks
    cache = tmp_path / "hub"
    snap = make_cache(cache, files)
    dst = tmp_path / "view"
    plan, hosts = plan_for(tmp_path, cache, str(dst), ["n1"]), [LocalNode("n1")]
    shutil.copytree(snap, dst)
    assert run(plan, hosts).views[0].nodes["n1"].kept == 4
    changed = differ_between_samples(files[name])
    make_cache(cache, {**files, name: changed}, commit=COMMIT2)
    before = tree_state(dst)
    with pytest.raises(NodeError) as e:
        run(plan, hosts)
    why = e.value.failures["n1"]
    assert f"{dst}/{name}" in why and blob_name(changed) in why and f"--replace-foreign {name}" in why, why
    assert tree_state(dst) == before
    node = run(plan, hosts, replace_foreign=[name]).views[0].nodes["n1"]
    assert os.readlink(dst / name) == f"{snap.parent / COMMIT2}/{name}"
    assert node.kept == 3
