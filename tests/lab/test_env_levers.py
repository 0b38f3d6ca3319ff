"""Environment levers checked before a sweep's first boot (labkit/serve/envcheck.py; docs/sweeps.md, "Checked
before the first boot"): an engine-named variable the engine's code never mentions would give identical boots,
so the sweep refuses it, unless `--allow-env` gives a reason, which the record keeps; names other libraries read
are listed, never refused. The search is the real `grep` in the engine's real package: the simulator's on a sim
lane, the vLLM CPU build's on the tiny-vllm lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit import lab
from labkit.cli.app import main
from labkit.errors import RecipeError
from labkit.lab.sweep_run import check_before_boot
from labkit.serve import EnvLever, split_levers
from labkit.store import read_sweep
from tests.support.lanes import sim_recipe
from tests.support.vllm import vllm_available

PORT = 18830
FAKE = "VLLM_LABKIT_NO_SUCH_LEVER"  # no engine's code holds it
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    root = tmp_path / "recipes"
    sim_recipe(root / "envsim", port=PORT)
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    return root


def test_engine_named_variables_are_searched_and_the_others_listed():
    levers = [
        EnvLever("VLLM_X", "engine.env"),
        EnvLever("NCCL_DEBUG", "engine.env"),
        EnvLever("VLLM_X", "again"),
    ]
    checked, unchecked = split_levers([*levers, EnvLever("B12X_Y", "swept"), EnvLever("SGL_Z", "swept")])
    assert [x.name for x in checked] == ["VLLM_X", "B12X_Y", "SGL_Z"] and checked[0].origin == "engine.env"
    assert [x.name for x in unchecked] == ["NCCL_DEBUG"]


def test_a_variable_the_engines_code_never_mentions_is_refused_before_any_boot(recipes, tmp_path):
    results = tmp_path / "results"
    with pytest.raises(RecipeError) as e:
        lab.sweep("envsim", [f"engine.env.{FAKE}=1,2"], results=results, progress=False)
    text = str(e.value)
    assert str(recipes / "envsim" / "recipe.toml") in text and f"--over {FAKE}" in text
    assert "never mentions it" in text and "the engine's Python on the head" in text and "labkit/sim" in text
    assert (
        not (results / "envsim").exists() and not (results / "_sweeps").exists()
    )  # nothing booted or stored


def test_allow_env_runs_it_and_the_record_keeps_the_reason(recipes, tmp_path, capsys):
    results = tmp_path / "results"
    over = ["--over", f"engine.env.{FAKE}=1,2", "--runs", "1", "--results", str(results)]
    assert main(["sweep", "envsim", *over, "--allow-env", FAKE]) == 1  # a name without its reason
    assert "--reason" in capsys.readouterr().err and not results.exists()
    assert main(["sweep", "envsim", *over, "--allow-env", FAKE, "--reason", "the lab's plugin reads it"]) == 0
    (path,) = (results / "_sweeps" / "envsim").glob("*.json")
    record = read_sweep(path)
    assert record.allowed_env == {FAKE: "the lab's plugin reads it"}
    assert [p.status for p in record.points] == ["measured", "measured"]


def test_names_other_libraries_read_are_listed_and_never_refused(recipes, capsys):
    sp = lab.sweep_plan("envsim", ["engine.env.NCCL_DEBUG=INFO,WARN"])
    check_before_boot(sp, sp.plans, None, progress=True)
    assert "not checked, read by other libraries than the engine's: NCCL_DEBUG (swept by --over" in (
        capsys.readouterr().err
    )


@pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")
def test_the_vllm_build_mentions_its_own_variable_and_not_the_b12x_switch(tmp_path, monkeypatch, capsys):
    """The lab note's third lever, B12X_W4A16_MXFP4_PREFILL_MIN_TOKENS, is a name the stock vLLM never reads:
    swept on the stock build it is refused; VLLM_CPU_KVCACHE_SPACE is found in the vLLM package."""
    folder = tmp_path / "recipes" / "tinyv"
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text((REPO / "recipes" / "tiny-vllm" / "recipe.toml").read_text())
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    found = lab.sweep_plan("tinyv", ["engine.env.VLLM_CPU_KVCACHE_SPACE=1,2"])
    check_before_boot(found, found.plans, None, progress=True)
    assert "VLLM_CPU_KVCACHE_SPACE (swept by --over" in capsys.readouterr().err
    b12x = lab.sweep_plan("tinyv", ["engine.env.B12X_W4A16_MXFP4_PREFILL_MIN_TOKENS=0,4096"])
    with pytest.raises(RecipeError, match="B12X_W4A16_MXFP4_PREFILL_MIN_TOKENS.*never mentions it"):
        check_before_boot(b12x, b12x.plans, None, progress=False)
