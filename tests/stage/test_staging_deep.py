"""Deep verification (issue 17, item 2) against real files on this machine: the SHA-256 of each local copy
against the blob name its snapshot link resolves to, hashed once and then trusted while size, mtime and
ctime stay; a mismatch names both hashes and is re-copied; the staging record says which check each file had.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.errors import NodeError, RecipeError
from labkit.recipe import load_recipe
from labkit.stage.assess import MANIFEST_NAME
from tests.support.hf_cache import (
    LOCAL,
    LocalNode,
    blob_name,
    default_files,
    make_cache,
    payload,
    plan_for,
    write_recipe,
)
from tests.support.staging import differ_between_samples
from tests.support.staging import run_stage as run

SAMPLED = "sampled xxh3 8 blocks"
DEEP = "deep sha256"
CACHED = "deep sha256 (cached, size+mtime+ctime unchanged)"


def ops(host: LocalNode) -> list[str]:
    """The node-script ops run, in order (the word after the script)."""
    import shlex

    return [shlex.split(c)[5] for c in host.calls]


def test_deep_catches_a_same_size_copy_whose_sampled_blocks_match_and_recopies_it(world):
    plan, snap, dst, hosts = world
    run(plan, hosts)
    name = LOCAL[0]
    good = default_files()[name]
    bad = differ_between_samples(good)
    (dst / name).write_bytes(bad)
    assert run(plan, hosts).verification_only  # the documented limit of the sampled check
    report = run(plan, hosts, deep=True)
    node = report.views[0].nodes["n1"]
    assert (node.copied, node.verified) == (1, 1)
    (note,) = [r for r in node.repaired if name in r]
    assert hashlib.sha256(bad).hexdigest() in note and blob_name(good) in note and "re-copying" in note
    assert (dst / name).read_bytes() == good
    entry = json.loads((dst / MANIFEST_NAME).read_text())["files"][name]
    assert entry["deep"]["sha256"] == blob_name(good) and entry["deep"]["size"] == len(good)
    assert node.verification == {LOCAL[0]: DEEP, LOCAL[1]: DEEP}


def test_a_deep_hash_is_computed_once_and_trusted_while_size_mtime_and_ctime_stay(world):
    plan, snap, dst, hosts = world
    first = run(plan, hosts, deep=True).views[0].nodes["n1"]
    assert first.verification == {LOCAL[0]: DEEP, LOCAL[1]: DEEP}
    hosts[0].calls.clear()
    again = run(plan, hosts, deep=True)
    assert again.verification_only
    assert again.views[0].nodes["n1"].verification == {LOCAL[0]: CACHED, LOCAL[1]: CACHED}
    assert ops(hosts[0]) == ["probe"]  # nothing hashed: one read-only probe
    # A sampled stage keeps the record; the record of a file touched since is dropped and re-hashed.
    assert run(plan, hosts).views[0].nodes["n1"].verification == {LOCAL[0]: SAMPLED, LOCAL[1]: SAMPLED}
    st = (dst / LOCAL[1]).stat()
    time.sleep(0.01)
    os.utime(dst / LOCAL[1], ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime put back: ctime moved
    hosts[0].calls.clear()
    third = run(plan, hosts, deep=True).views[0].nodes["n1"]
    assert third.verification == {LOCAL[0]: CACHED, LOCAL[1]: DEEP}
    assert ops(hosts[0]).count("hash") == 1


def test_the_staging_record_says_which_verification_each_file_had(world):
    plan, snap, dst, hosts = world
    record = run(plan, hosts).to_dict()
    assert record["views"][0]["nodes"]["n1"]["verification"] == {LOCAL[0]: SAMPLED, LOCAL[1]: SAMPLED}
    assert record["views"][0]["verify"] == "sampled"
    record = run(plan, hosts, deep=True).to_dict()
    assert record["views"][0]["nodes"]["n1"]["verification"] == {LOCAL[0]: DEEP, LOCAL[1]: DEEP}
    assert record["views"][0]["verify"] == "deep"
    json.dumps(record)
    assert DEEP in run(plan, hosts, deep=True).table()


def test_recipe_staging_verify_deep_makes_every_stage_deep(tmp_path):
    cache = tmp_path / "hub"
    make_cache(cache)
    dst = tmp_path / "view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"], verify="deep")
    assert plan.staging[0].verify == "deep"
    assert plan_for(tmp_path / "b", cache, str(dst), ["n1"]).staging[0].verify == "sampled"
    node = run(plan, [LocalNode("n1")]).views[0].nodes["n1"]
    assert node.verification == {LOCAL[0]: DEEP, LOCAL[1]: DEEP}
    with pytest.raises(RecipeError) as e:
        load_recipe(write_recipe(tmp_path / "c", cache, str(dst), ["n1"], verify="full"))
    assert e.value.key == "staging[0].verify"


def test_a_copy_whose_bytes_do_not_hash_to_its_blob_name_is_never_renamed_into_place(world):
    """A blob in the shared cache whose content does not match its name (damaged on the NAS): a deep stage
    hashes the copy before the rename, names both hashes and leaves no file under the final name."""
    plan, snap, dst, hosts = world
    blob = (snap / LOCAL[0]).resolve()
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(NodeError) as e:
        run(plan, hosts, deep=True)
    why = e.value.failures["n1"]
    assert hashlib.sha256(bytes(data)).hexdigest() in why and blob.name in why, why
    assert not (dst / LOCAL[0]).exists()
    assert not [p for p in dst.iterdir() if p.name.startswith(".labkit-partial.")]


def test_deep_also_checks_hand_made_copies_it_keeps(tmp_path):
    """A hand-made copy (a regular file at a name the view would link) is verified deep like the copies."""
    name = "model-00001-of-00003.safetensors"
    files = {**default_files(), name: payload(1_000_000, 9)}  # larger than the 8 sampled blocks
    cache = tmp_path / "hub"
    make_cache(cache, files)
    dst = tmp_path / "view"
    plan, hosts = plan_for(tmp_path, cache, str(dst), ["n1"]), [LocalNode("n1")]
    dst.mkdir(parents=True)
    good = files[name]
    (dst / name).write_bytes(good)
    node = run(plan, hosts, deep=True).views[0].nodes["n1"]
    assert node.verification[name] == DEEP and node.kept == 1
    (dst / name).write_bytes(differ_between_samples(good))
    with pytest.raises(NodeError) as e:
        run(plan, hosts, deep=True)
    assert f"{dst}/{name}" in e.value.failures["n1"] and blob_name(good) in e.value.failures["n1"]


def test_cli_stage_deep_and_replace_foreign(tmp_path):
    from labkit.cli import main

    cache = tmp_path / "hub"
    snap = make_cache(cache)
    dst = tmp_path / "view"
    plan_for(tmp_path, cache, str(dst), ["localhost"])  # writes tmp_path/recipe/recipe.toml
    recipe = str(tmp_path / "recipe" / "recipe.toml")
    dst.mkdir()
    (dst / "config.json").write_text("{}\n")  # the user's own
    assert main(["stage", recipe]) == 1
    assert (dst / "config.json").read_text() == "{}\n" and not (dst / LOCAL[0]).exists()
    assert main(["stage", recipe, "--deep", "--replace-foreign", "config.json"]) == 0
    assert os.readlink(dst / "config.json") == f"{snap}/config.json"
    manifest = json.loads((dst / MANIFEST_NAME).read_text())
    assert manifest["files"][LOCAL[0]]["deep"]["sha256"] == blob_name(default_files()[LOCAL[0]])


def test_a_deep_check_of_a_plan_that_bypassed_the_recipe_is_refused_on_a_bad_mode(world):
    plan, snap, dst, hosts = world
    bad = replace(plan, staging=(replace(plan.staging[0], verify="fast"),))
    with pytest.raises(RecipeError) as e:
        run(bad, hosts)
    assert e.value.key == "staging[0].verify" and hosts[0].calls == []


def test_sources_without_a_blob_name_are_hashed_for_deep(tmp_path):
    """A shared cache whose snapshot holds plain files (no blobs/ link): deep hashes the source too."""
    cache = tmp_path / "hub"
    snap = make_cache(cache)
    for name in LOCAL:
        data = (snap / name).read_bytes()
        (snap / name).unlink()
        (snap / name).write_bytes(data)
    dst = tmp_path / "view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    node = run(plan, [LocalNode("n1")], deep=True).views[0].nodes["n1"]
    assert node.verification == {n: "deep sha256 (source hashed: no blob name)" for n in LOCAL}
    assert Path(dst / LOCAL[0]).read_bytes() == default_files()[LOCAL[0]]


def test_the_node_side_hashes_as_the_hub_names_blobs(tmp_path):
    """LFS blobs are named by SHA-256, git blobs by git's SHA-1 of "blob <size>\\0" and the bytes."""
    import shutil
    import subprocess

    from labkit.stage.node.script import file_hash, hash_algo

    data = os.urandom(3 * 1024 * 1024 + 7)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert file_hash(str(path), "sha256")["hex"] == hashlib.sha256(data).hexdigest()
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert file_hash(str(path), "git-sha1")["hex"] == git_sha1
    if shutil.which("git"):
        out = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == git_sha1
    assert (hash_algo("a" * 64), hash_algo("b" * 40), hash_algo("x" * 64), hash_algo(None)) == (
        "sha256",
        "git-sha1",
        None,
        None,
    )
