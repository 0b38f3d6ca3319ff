"""`labkit bench` under a prod-like recipe: the production SGLang lane's recipe with its measurement plan's
workloads and keys kept and its sizes scaled down by 16 (a window of 8,192 for its 131,072), pointed with `--url`
at an endpoint labkit did not boot, as the lab runs `labkit bench prod --url http://dgx5:30000` on the cluster.
On the simulator (SGLang's flavor, at two step budgets) and on the real vLLM CPU lane (the session's shared one),
the runs are stored and `labkit compare` takes them: no blocking difference, every headline figure compared.
What is asserted of the figures is their presence and, on the simulator, the direction its step scheduler makes
true (a smaller budget chunks the arrival: a later first token, a shorter stall of the streams)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

from labkit import report
from labkit.sim.oracle import SimOracle
from labkit.store import load_results
from tests.support.serving import REPO, labkit_cli

PROD = REPO / "recipes" / "dsv41-flash-1017-4x-sglang-ep2" / "recipe.toml"
STOCK = REPO / "recipes" / "dsv41-flash-1017-4x-vllm032" / "recipe.toml"
# the simulator speculating as the production lane does: DSpark, K = 5
DSPARK = {"spec_method": "dspark", "spec_k": 5, "spec_accept": [0.9, 0.8, 0.7, 0.6, 0.5]}
TINY = REPO / "recipes" / "tiny-vllm" / "recipe.toml"

# The production plan (recipes/dsv41-flash-1017-4x-sglang-ep2), every token count / 16 and every pause / 16;
# turns, repeats and runs cut so that one bench takes well under a minute. The streams decode 512 tokens, not
# 64: a tiny lane decodes them faster than the arrivals' spacing.
SCALED = """[measure]
api = "chat"
runs = 2
decode = { concurrency = [1, 2], turns = 2, output_tokens = 16 }
prefill = { prompt_tokens = [256, 788], repeats = 1 }
canary = {}
depth = { tokens = [512, 2048, 4096, 7500], prompt_tokens = 8, output_tokens = 4 }
interference = { prompt_tokens = [512], context_tokens = 2048, streams = 2, stream_tokens = 512, warm_tokens = 8, arrivals = 3, spacing_s = 0.75 }

[measure.load]
sessions = [1, 2, 4]
turns = 2
prompt_tokens = 512
output_tokens = 16
tool_tokens = 64
think_s = 0.125

[measure.slo]
ttft_s = 1.5
percentile = 99

"""


def _shape(plan: dict) -> dict:
    """A plan's keys, nested: what must match between the production plan and the scaled one."""
    return {k: _shape(v) if isinstance(v, dict) else None for k, v in plan.items()}


def _with_scaled_plan(text: str) -> str:
    """The recipe text with its [measure] tables (up to the first variant) replaced by SCALED."""
    head, rest = text.split("[measure]\n", 1)
    _, tail = rest.split("[variants.", 1)
    return head + SCALED + "[variants." + tail


def _lane(root: Path, name: str, source: Path, port: int | None = None) -> None:
    text = _with_scaled_plan(source.read_text())
    if port is not None:
        text = text.replace("port = 18670", f"port = {port}")
    (root / name).mkdir(parents=True)
    (root / name / "recipe.toml").write_text(text)


def _labkit(*args: str, env_root: Path) -> subprocess.CompletedProcess:
    """`labkit ARGS` on this checkout with the test's recipes, finished."""
    proc = labkit_cli(*args, env={"LABKIT_RECIPES": str(env_root)}, cwd=REPO)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run_ids(results: Path, recipe: str) -> list[str]:
    return sorted(d.run_id for d in load_results(results).docs.values() if d.recipe == recipe)


def _compare(a: list[str], b: list[str], results: Path, root: Path) -> dict:
    out = _labkit("compare", ",".join(a), ",".join(b), "--results", str(results), "--json", env_root=root)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_scaled_plan_keeps_every_workload_and_key_of_the_production_plan():
    prod = tomllib.loads(PROD.read_text())["measure"]
    assert _shape(tomllib.loads(SCALED)["measure"]) == _shape(prod)


def test_bench_at_two_sim_budgets_stores_runs_that_compare_tells_apart(tmp_path, monkeypatch, lab_record):
    """The production recipe under its own name, DSpark K5 as it runs, at a simulator with SGLang's flavor and
    speculation: stored as the production lane's runs, beside the note's recorded ranges in its tables."""
    root, results = tmp_path / "recipes", tmp_path / "results"
    _lane(root, PROD.parent.name, PROD)
    shutil.copytree(STOCK.parent, root / STOCK.parent.name)  # the recorded stock lane resolves too
    sides = {}
    for budget in (4096, 128):
        # prefill slow enough that 512 new tokens take ~100 ms; K5 as the recipe's verify width says
        sets = {"flavor": "sglang", "prefill_tps": 5000.0, "max_num_batched_tokens": budget, **DSPARK}
        before = _run_ids(results, PROD.parent.name) if results.exists() else []
        with SimOracle(sets=sets) as sim:
            done = _labkit(
                "bench", "prod", "--url", sim.url, "--results", str(results), "--runs", "1", "-q", env_root=root
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("stored: ") == 1
        sides[budget] = [r for r in _run_ids(results, PROD.parent.name) if r not in before]
    docs = load_results(results).docs
    for doc in docs.values():
        m = doc.summary.measures
        assert doc.provenance.raw["endpoint_origin"] == "url"
        assert doc.variant_id == "spec-dspark_staging-local-view"
        for key in ("depth_7500_ttft", "interference_512_ttft", "interference_512_stall", "accept_length"):
            assert m.get(key) is not None, (doc.run_id, key)
        assert any(k.startswith("load_ttft@sessions=4") for k in m), sorted(m)
    c = _compare(sides[4096], sides[128], results, root)
    assert c["gate"]["blocked"] == [], c["gate"]
    rows = {r["measure"]: r for r in c["measures"]}
    # the step scheduler's truth: chunks of 128 make the arrival wait behind decode steps and spare the streams
    assert rows["interference_512_ttft"]["mean_b"] > rows["interference_512_ttft"]["mean_a"]
    assert rows["interference_512_gap_max"]["mean_b"] < rows["interference_512_gap_max"]["mean_a"]
    # the note's tables put the measured production runs beside its recorded ranges (the lab record's
    # recorded runs, as committed)
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    for lane in (PROD.parent.name, STOCK.parent.name):
        shutil.copytree(lab_record / lane, results / lane, dirs_exist_ok=True)
    tables = report.generate(results, REPO / "results" / "tables.toml", write=False, plots=False).tables
    (dspark,) = [t for t in tables if t.id == "dspark"]
    assert any(str(c).startswith("production SGLang EP2 4x, measured") for c in dspark.frame.columns)


def test_bench_on_the_real_vllm_lane_stores_runs_that_compare_accepts(tmp_path, vllm_lane):
    """The tiny-vllm recipe with the production plan, at the shared lane's URL (ngram K = 4, as its variant)."""
    root, results = tmp_path / "recipes", tmp_path / "results"
    _lane(root, "tinyprod", TINY)
    done = _labkit(
        "bench", "tinyprod", "--spec", "ngram", "--url", vllm_lane.url, "--results", str(results), "-q",
        env_root=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = _run_ids(results, "tinyprod")
    for doc in load_results(results).docs.values():
        m = doc.summary.measures
        assert doc.status == "complete" and not doc.simulated
        for key in ("decode_c2_agg", "depth_7500_ttft", "interference_512_ttft", "interference_512_stall"):
            assert m.get(key) is not None, (doc.run_id, key)
        assert m["interference_512_stall"] >= 0
    c = _compare([first], [second], results, root)
    assert c["gate"]["blocked"] == [], c["gate"]
    assert {"decode_c1", "interference_512_ttft"} <= {r["measure"] for r in c["measures"]}
