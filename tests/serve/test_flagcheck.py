"""The sweep flag check (labkit.serve.flagcheck.check_flags): against the simulator's real --help on this machine
(a process lane), and, for a docker vLLM lane whose image is not on the head (the docker shim answers `docker
image inspect` as docker does), against labkit's list of known vLLM flags, saying so and why."""

from __future__ import annotations

import io
import json
import textwrap

import pytest

from labkit.recipe import load_recipe
from labkit.serve import Lane, check_flags
from labkit.serve.engines.vllm import Vllm
from labkit.serve.flagcheck import known_flag_checks
from labkit.serve.verdict import FAIL, OK
from tests.support.lanes import sim_recipe
from tests.support.serving import served_plan

SWEPT = "swept by --over"
IMAGE = "vllm/vllm-openai:v0.32.0"


@pytest.fixture
def sim_lane(tmp_path):
    lane = Lane(served_plan(sim_recipe(tmp_path / "lane", 18961)), progress=io.StringIO())
    yield lane
    lane.close()


def test_a_swept_sim_flag_is_checked_against_the_sims_own_help(sim_lane):
    (ok,) = check_flags(sim_lane.state, [("--decode-tps", SWEPT)])
    assert ok.status == OK and ok.facts["source"] == "help", ok
    assert ok.node == "localhost" and ok.check == "engine args" and ok.facts["flags"] == ["--decode-tps"]
    assert "-m labkit.sim --help` on localhost for its flags" in sim_lane.progress.getvalue()


def test_a_misspelled_swept_sim_flag_fails_with_the_closest_one_from_the_help(sim_lane):
    (bad,) = check_flags(sim_lane.state, [("--decode-tsp", SWEPT), ("--prefill-tps", SWEPT)])
    assert bad.status == FAIL and bad.facts["source"] == "help"
    assert bad.facts["suggestion"] == "--decode-tps" and bad.facts["flag"] == "--decode-tsp"
    assert bad.result.startswith("--decode-tsp (swept by --over) is not listed by `")
    assert bad.result.endswith("-m labkit.sim --help`; did you mean --decode-tps?")


@pytest.fixture
def vllm_lane(cluster, tmp_path):
    """A docker vLLM lane on the sshd nodes whose image the head's docker does not have."""
    cluster.reset_shims()
    cluster.clear_calls()
    folder = tmp_path / "vllm"
    folder.mkdir()
    recipe = f"""
        [model]
        repo = "org/tiny"
        [engine]
        kind = "vllm"
        image = "{IMAGE}"
        runtime = "docker"
        port = 18962
        parallel = {{ tp = 2 }}
        [engine.args]
        "--max-model-len" = 4096
        [cluster]
        nodes = {json.dumps(list(cluster.addresses[:2]))}
        ssh_port = {cluster.port}
        user = "{cluster.user}"
        connect_timeout = 3
    """
    (folder / "recipe.toml").write_text(textwrap.dedent(recipe))
    cluster.set_images(cluster.addresses[0], {IMAGE: None})
    lane = Lane(load_recipe(folder).resolve(), ssh=cluster.ssh_options(), progress=io.StringIO())
    yield lane
    lane.close()
    cluster.reset_shims()


def test_without_the_image_on_the_head_the_known_vllm_flags_are_used(vllm_lane, cluster):
    flags = [
        ("--max-num-batched-tokens", SWEPT),
        ("--max-num-batched-token", SWEPT),
        ("--max_num_seqs", SWEPT),
    ]
    ok, bad, underscored = check_flags(vllm_lane.state, flags)
    head = cluster.addresses[0]
    assert ok.node == head and ok.status == OK and ok.facts["source"] == "known flags"
    assert ok.result.startswith(
        "--max-num-batched-tokens (swept by --over) is known: checked against labkit's list of known vLLM flags, "
        f"not the image ({IMAGE} is not on the head)"
    )
    assert bad.status == FAIL and bad.facts["source"] == "known flags"
    assert bad.facts["suggestion"] == "--max-num-batched-tokens"
    assert bad.result == (
        "--max-num-batched-token (swept by --over) is not in labkit's list of known vLLM flags; did you mean "
        f"--max-num-batched-tokens? (checked against that list, not the image: {IMAGE} is not on the head; "
        "`labkit doctor --pull` lets the image's own --help be asked)"
    )
    assert underscored.status == OK  # vLLM reads --max_num_seqs as --max-num-seqs (canonical)
    calls = cluster.calls(head)
    assert ["image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", IMAGE] in calls
    assert not [c for c in calls if c[0] in ("run", "pull")]  # the help was not asked, nothing pulled
    assert cluster.calls(cluster.addresses[1]) == []  # only the head is asked
    assert "checking against labkit's list of known vLLM flags" in vllm_lane.progress.getvalue()


def test_the_known_flags_hold_every_flag_of_the_repos_recipes_and_labkits_launches():
    from labkit.recipe.lookup import load_plan
    from labkit.serve.enginehelp import lane_flags
    from labkit.serve.engines import engine_for
    from labkit.serve.plan import launches, python_for

    plan = load_plan("dsv41", spec="dspark")
    added = [
        f for f, origin in lane_flags(plan, launches(plan), ("vllm", "serve")) if origin == "added by labkit"
    ]
    assert added and [f for f in added if f not in Vllm.known_flags] == []
    for recipe in ("dsv41-flash-1017-4x-sglang-ep2", "tiny-llamacpp"):
        plan = load_plan(recipe)
        engine = engine_for(plan)
        found = lane_flags(plan, launches(plan), engine.command(python_for(plan)))
        assert "added by labkit" in dict(found).values(), recipe
        assert [f for f, _ in found if f not in engine.known_flags] == [], recipe
    (none,) = known_flag_checks("n", "vllm", frozenset(), [("--zzz", SWEPT)], "why")
    assert (
        none.status == FAIL
        and none.facts["suggestion"] is None
        and none.result.endswith("flags (checked against that list, not the image: why)")
    )


def test_a_docker_sim_lane_asks_the_help_in_its_image_and_falls_back_without_it(cluster, tmp_path):
    cluster.reset_shims()
    cluster.clear_calls()
    head = cluster.addresses[0]
    plan = sim_recipe(
        tmp_path / "sim", 18963, nodes=[head], runtime="docker", ssh_port=cluster.port, user=cluster.user
    )
    lane = Lane(served_plan(plan), ssh=cluster.ssh_options(), progress=io.StringIO())
    try:
        (ok,) = check_flags(lane.state, [("--decode-tps", SWEPT)])
        assert ok.status == OK and ok.facts["source"] == "help"
        assert [
            "run",
            "--rm",
            "--gpus",
            "all",
            "labkit/sim:shim",
            "python3",
            "-m",
            "labkit.sim",
            "--help",
        ] in (cluster.calls(head))
        cluster.set_images(head, {"labkit/sim:shim": None})
        known, bad = check_flags(lane.state, [("--decode-tps", SWEPT), ("--decode-tsp", SWEPT)])
        assert known.status == OK and known.facts["source"] == "known flags"
        assert (
            "labkit's list of known simulator flags, not the image (labkit/sim:shim is not on the head)"
            in (known.result)
        )
        assert bad.status == FAIL and bad.facts["suggestion"] == "--decode-tps"
    finally:
        lane.close()
        cluster.reset_shims()
