"""What `labkit show` says of a lane's roofline when it cannot print one: no checkpoint facts beside the recipe,
or a device whose bandwidth labkit does not know (the file and the known names said); and the figures follow
the recipe (its KV cache dtype, its concurrencies)."""

from __future__ import annotations

import shutil
from pathlib import Path

from labkit import lab

REPO = Path(__file__).resolve().parents[2]
DSV41 = REPO / "recipes" / "dsv41-flash-1017-4x-vllm032"


def _copy(tmp_path: Path, monkeypatch, edit=lambda text: text, checkpoint: bool = True) -> Path:
    folder = tmp_path / "recipes" / "lane"
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(edit((DSV41 / "recipe.toml").read_text()))
    if checkpoint:
        shutil.copytree(DSV41 / "checkpoint", folder / "checkpoint")
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    return folder


def test_a_lane_without_checkpoint_facts_says_so(tmp_path, monkeypatch):
    folder = _copy(tmp_path, monkeypatch, checkpoint=False)
    text = lab.roofline(lab.plan("lane", spec="none"))
    assert (
        text
        == f"roofline: no checkpoint/ beside {folder / 'recipe.toml'} (its config.json and header digest: docs/roofline.md)"
    )


def test_an_unknown_device_is_named_with_the_file_and_the_known_ones(tmp_path, monkeypatch):
    folder = _copy(tmp_path, monkeypatch, lambda t: t.replace('device = "GB10"', 'device = "B300"'))
    text = lab.roofline(lab.plan("lane", spec="none"))
    assert (
        text
        == f"roofline: no bandwidth for cluster.device = 'B300' in {folder / 'recipe.toml'} (known: GB10) and no "
        "measured run of this lane with a device probe"
    )


def test_the_lanes_concurrencies_and_speculation_are_the_columns(tmp_path, monkeypatch):
    _copy(tmp_path, monkeypatch)
    plain = lab.roofline(lab.plan("lane", spec="none"))
    header = next(line for line in plain.splitlines() if line.strip().startswith("c1"))
    assert header.split() == ["c1", "c2"]  # decode concurrency [1, 2], no speculation
    spec = lab.roofline(lab.plan("lane", spec="dspark"))
    assert "c1 K5 τ≤6" in spec and "draft heads, experts, GB" in spec


def test_the_device_names_a_bandwidth_and_is_not_part_of_the_lanes_hash(tmp_path, monkeypatch):
    folder = _copy(tmp_path, monkeypatch)
    with_device = lab.plan("lane", spec="none")
    toml = folder / "recipe.toml"
    toml.write_text(
        "\n".join(line for line in toml.read_text().splitlines() if not line.startswith("device ="))
    )
    without = lab.plan("lane", spec="none")
    assert (with_device.cluster.device, without.cluster.device) == ("GB10", None)
    assert with_device.recipe_hash == without.recipe_hash and with_device.lane_id == without.lane_id
