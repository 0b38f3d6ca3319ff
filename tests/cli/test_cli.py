"""The `labkit` command's exit codes and output, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.llamacpp import have_llama_cpp


def labkit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_check_passes_on_shipped_recipes():
    r = labkit("check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   dsv41-flash-1017-4x-vllm032" in r.stdout


def test_check_fails_on_a_broken_recipe(tmp_path):
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "recipe.toml").write_text('[model]\nrepo = "a/b"\n[engine]\nkind = "sim"\n')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "recipe.toml").write_text(
        '[model]\nrepo = "a/b"\n[engine]\nkind = "sim"\nport = "x"\n'
    )
    r = labkit("check", env={"LABKIT_RECIPES": str(tmp_path)})
    assert r.returncode == 1
    assert "FAIL bad" in r.stdout and "engine.port: expected an integer" in r.stdout
    assert "ok   good" in r.stdout
    assert labkit("check", "good", env={"LABKIT_RECIPES": str(tmp_path)}).returncode == 0


def test_show_dspark_prints_the_speculative_config():
    r = labkit("show", "dsv41", "--spec", "dspark")
    assert r.returncode == 0, r.stderr
    assert """--speculative-config '{"method":"dspark","num_speculative_tokens":5}'""" in r.stdout
    assert "stock vLLM + DSpark k5" in r.stdout


def test_show_json_and_generic_variant_flag():
    r = labkit("show", "dsv41", "-V", "staging=local-view", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["model_path"] == "/root/.cache/hf-view"
    assert data["variants"] == {"spec": "none", "staging": "local-view"}


def test_unknown_recipe_and_variant_exit_1_with_message():
    r = labkit("show", "dsv4l")
    assert r.returncode == 1 and "no recipe 'dsv4l'" in r.stderr and "Traceback" not in r.stderr
    r = labkit("show", "dsv41", "--spec", "dsprk")
    assert r.returncode == 1 and "did you mean 'dspark'" in r.stderr


def test_usage_error_exit_2():
    assert labkit("show").returncode == 2
    assert labkit("show", "dsv41", "-V", "nonsense").returncode == 1


def test_recipes_lists_aliases():
    r = labkit("recipes")
    assert r.returncode == 0
    assert "dsv41" in r.stdout and "spec: none|dspark; staging: nas|local-view" in r.stdout


@pytest.mark.skipif(not have_llama_cpp(), reason="the built model's path needs the 'llamacpp' extra")
def test_show_points_the_commands_at_a_labkit_built_model_without_building_it(tmp_path):
    """`show` materializes the tiny model's path for the commands (nothing is built); the plan stays as resolved."""
    r = labkit("show", "tiny-llamacpp", "--json", env={"LABKIT_CACHE": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["model_path"] == "labkit/tiny-llama"
    assert f"--model {tmp_path}/models/tiny-llama-" in data["commands"]["localhost"]
    assert not list(tmp_path.rglob("*.gguf"))


def test_check_and_show_warn_about_a_multinode_docker_lane_without_a_fabric(tmp_path):
    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "recipe.toml").write_text(
        '[model]\nrepo = "a/b"\n[engine]\nkind = "vllm"\nimage = "img:1"\nparallel = { tp = 2 }\n'
        '[cluster]\nnodes = ["dgx5", "dgx6"]\n'
    )
    env = {"LABKIT_RECIPES": str(tmp_path)}
    r = labkit("check", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[:2] == [
        "ok   flat (1 variants)  (warning: no NOTE.md)",
        f"     WARNING: {folder / 'recipe.toml'}: cluster.fabric: missing: this docker lane runs one vLLM engine "
        "across 2 nodes, and without [cluster.fabric] its engines get the host names dgx5, dgx6 as their "
        "addresses (a name that resolves to 127.0.1.1 on its own node leaves the ranks waiting until the boot "
        'times out); add [cluster.fabric] with interface = the netdev the engines talk over ("enp1s0f1np1" on a '
        "DGX Spark)",
    ]
    r = labkit("show", "flat", env=env)
    assert r.returncode == 0 and r.stdout.startswith(
        f"WARNING: {folder / 'recipe.toml'}: cluster.fabric: missing"
    )
    assert "WARNING" not in labkit("show", "dsv41").stdout + labkit("check").stdout
