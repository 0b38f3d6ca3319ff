"""`labkit bench` end to end: the lab-note table on stdout, records in a JSON file, clear errors."""

import os
import subprocess
import sys

from labkit.measure import BenchResult
from labkit.recipe.lookup import load_plan
from labkit.sim.oracle import SimOracle
from tests.support.workers import free_port


def _labkit(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], capture_output=True, text=True, timeout=timeout
    )


def test_bench_url_prints_lab_note_shape_and_writes_json(tmp_path):
    out = tmp_path / "run.json"
    with SimOracle(sets={"cold_requests": 1, "cold_decode_tps": 50}) as sim:
        p = _labkit(
            "bench",
            sim.url,
            "--cold",
            "--turns",
            "2",
            "--output-tokens",
            "20",
            "--prompt-tokens",
            "500",
            "--repeats",
            "1",
            "--json",
            str(out),
            "-q",
        )
    assert p.returncode == 0, p.stderr
    assert "on the first, cold turn" in p.stdout and "decode c2 (aggregate)" in p.stdout
    assert "prefill (500 prompt)" in p.stdout
    back = BenchResult.load(out)
    assert back.summary.n_ok == len(back.records) and back.provenance["endpoint"].endswith("/v1")
    # no boot log here: the KV pool comes from the API, every source kept (issue 16)
    pool = back.provenance["kv_pool"]
    assert (
        pool["chosen"] == "cache_config_info.kv_cache_size_tokens" and "cache_config_info" in pool["sources"]
    )
    assert (
        back.summary.measures["kv_pool_tokens"] == pool["tokens"]
        and "engine API" in back.summary.method["kv_pool_tokens"]
    )


def test_bench_url_measures_no_cold_turn_unless_told_the_engine_was_just_booted(tmp_path):
    with SimOracle() as sim:
        p = _labkit(
            "bench",
            sim.url,
            "--turns",
            "1",
            "--output-tokens",
            "10",
            "--concurrency",
            "1",
            "--no-prefill",
            "--json",
            str(tmp_path / "r.json"),
            "-q",
        )
    assert p.returncode == 0, p.stderr
    back = BenchResult.load(tmp_path / "r.json")
    assert not any(r.cold for r in back.records) and "cold turn" not in p.stdout


def test_bench_recipe_uses_its_plan_against_url(tmp_path):
    with SimOracle(
        preset="dsv41-stock-dspark",
        sets={"decode_tps": 300, "prefill_tps": 50_000, "boot_weights_s": 0.05, "boot_init_s": 0.05},
    ) as sim:
        p = _labkit(
            "bench",
            "sim",
            "--spec",
            "dspark",
            "--url",
            sim.url,
            "--turns",
            "1",
            "--output-tokens",
            "30",
            "--prompt-tokens",
            "300",
            "--repeats",
            "1",
            "-q",
            "--json",
            str(tmp_path / "r.json"),
            "--no-store",  # the print path; test_bench_store.py stores
        )
    assert p.returncode == 0, p.stderr
    assert "acceptance" in p.stdout and "of 5" in p.stdout and "incl. bonus" in p.stdout
    back = BenchResult.load(tmp_path / "r.json")
    assert back.provenance["variant"] == "spec-dspark" and back.provenance["recipe_hash"]
    # the records name the lane by its lane id (`labkit run` names it by the plan's label)
    assert {r.lane for r in back.records} == {load_plan("sim", spec="dspark").lane_id}
    # the sim recipe states no K: it is the count of the engine's per-position series
    assert (
        back.summary.measures["accept_k"] == 5 and "5 per-position series" in back.summary.method["accept_k"]
    )


def test_bench_recipe_takes_k_from_its_speculative_config(tmp_path):
    """`labkit bench <recipe>` passes the recipe's num_speculative_tokens as K, and the method says so."""
    import shutil

    from labkit.recipe import repo_root

    recipes = tmp_path / "recipes"
    shutil.copytree(repo_root() / "recipes" / "sim", recipes / "sim")
    toml = recipes / "sim" / "recipe.toml"
    toml.write_text(
        toml.read_text()
        + 'engine.args."--speculative-config" = { method = "dspark", num_speculative_tokens = 5 }\n'
    )
    with SimOracle(preset="dsv41-stock-dspark", sets={"decode_tps": 300}) as sim:
        p = subprocess.run(
            [sys.executable, "-m", "labkit", "bench", "sim", "--spec", "dspark", "--url", sim.url]
            + ["--turns", "1", "--output-tokens", "20", "--concurrency", "1", "--no-prefill", "-q"]
            + ["--json", str(tmp_path / "r.json"), "--results", str(tmp_path / "results")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LABKIT_RECIPES": str(recipes)},
        )
    assert p.returncode == 0, p.stderr
    back = BenchResult.load(tmp_path / "r.json")
    assert back.summary.method["accept_k"] == "K: recipe --speculative-config num_speculative_tokens"
    assert " of 5" in p.stdout


def test_bench_errors_are_clear():
    port = free_port(18290, 18299)
    p = _labkit("bench", f"http://127.0.0.1:{port}", "-q")
    assert p.returncode == 1 and f"127.0.0.1:{port}" in p.stderr and "Traceback" not in p.stderr
    p = _labkit("bench", "http://127.0.0.1:1", "--prompt-tokens", "4k")
    assert p.returncode == 2 and "comma-separated integers" in p.stderr
    p = _labkit("bench", "no-such-recipe")
    assert p.returncode == 1 and "no recipe 'no-such-recipe'" in p.stderr
    p = _labkit("bench", "http://127.0.0.1:1", "--spec", "dspark")
    assert p.returncode == 1 and "bare URL" in p.stderr


def test_bench_url_with_load_levels_prints_a_row_per_level_and_refuses_bad_levels(tmp_path):
    out = tmp_path / "run.json"
    with SimOracle(sets={"decode_tps": 200, "prefill_tps": 20000}) as sim:
        p = _labkit(
            "bench", sim.url, "--load", "1,4", "--load-requests", "8", "--slo", "ttft_s=0.5,tpot_s=0.05",
            "--no-prefill", "--turns", "0", "--json", str(out), "-q",
        )  # fmt: skip
        mixed = _labkit("bench", sim.url, "--load", "1,0.5/s", "-q")
        typo = _labkit("bench", sim.url, "--load", "2", "--slo", "ttft=1", "-q")
        alone = _labkit("bench", sim.url, "--slo", "ttft_s=1", "-q")
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("load c")]
    assert [r.split()[1] for r in rows] == ["c1", "c4"] and all("attainment" in r for r in rows), p.stdout
    back = BenchResult.load(out)
    assert back.summary.measures["load_peak_concurrency@load=4"] == 4
    assert sum(r.phase == "load" for r in back.records) == 16
    assert mixed.returncode == 1 and "--load: measure.load: levels are all concurrencies" in mixed.stderr
    assert typo.returncode == 1 and "measure.slo.ttft: unknown key (did you mean 'ttft_s'?)" in typo.stderr
    assert alone.returncode == 1 and "--slo go with --load" in alone.stderr
