"""What an imported result measured is its setting, taken from the file: guidellm's strategy gives the
concurrency or the rate and its pacing, its synthetic data the lengths; vllm bench serve names no configured
length, so its counted means are kept and said to be counted. Results of different settings are different
variants, and the comparability gate refuses two imports of different settings as it refuses two labkit plans."""

from __future__ import annotations

import json

import pytest

from labkit.exchange import import_file
from labkit.exchange.definitions import definition
from labkit.exchange.importing import read_file
from labkit.exchange.model import Setting
from labkit.lab import compare
from labkit.report import CompareError
from labkit.store import read_run
from tests.support.imports import IMPORTS, edited

GUIDELLM = IMPORTS / "guidellm.json"


def guidellm_with(tmp_path, name: str, strategy: dict, data: dict | None = None):
    doc = json.loads(GUIDELLM.read_text())
    doc["benchmarks"][0]["config"]["strategy"] = strategy
    if data:
        doc["config"]["spec"]["data"][0].update(data)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "strategy, setting, variant",
    [
        ({"type_": "synchronous", "max_concurrency": 1}, (1, None, None), "guidellm_c1_pp128_tg32"),
        ({"type_": "concurrent", "streams": 4}, (4, None, None), "guidellm_c4_pp128_tg32"),
        (
            {"type_": "throughput", "max_concurrency": 8},
            (8, "inf", "throughput"),
            "guidellm_c8_pp128_tg32_throughput",
        ),
        ({"type_": "constant", "rate": 4.0}, (None, "4", "constant"), "guidellm_pp128_tg32_r4_constant"),
        ({"type_": "poisson", "rate": 2.5}, (None, "2.5", "poisson"), "guidellm_pp128_tg32_r2.5_poisson"),
    ],
)
def test_guidellms_strategy_gives_the_concurrency_or_the_rate(tmp_path, strategy, setting, variant):
    [imp], _ = read_file(guidellm_with(tmp_path, "g.json", strategy))
    s = imp.setting
    assert (s.concurrency, s.rate, s.schedule) == setting
    assert (s.prompt_tokens, s.output_tokens) == (128, 32)
    assert s.variant_id("guidellm") == variant


def test_two_guidellm_rates_are_two_variants(tmp_path):
    four = guidellm_with(tmp_path, "r4.json", {"type_": "constant", "rate": 4.0})
    two = guidellm_with(tmp_path, "r2.json", {"type_": "constant", "rate": 2.0})
    [a] = import_file(four, results=tmp_path / "results")
    [b] = import_file(two, results=tmp_path / "results")
    assert a.path.parent != b.path.parent


def test_guidellm_lengths_drawn_from_a_spread_are_no_setting(tmp_path):
    spread = guidellm_with(tmp_path, "s.json", {"type_": "synchronous"}, {"prompt_tokens_stdev": 16})
    [imp], _ = read_file(spread)
    assert (imp.setting.prompt_tokens, imp.setting.output_tokens) == (None, None)
    assert any("lengths varied" in n for n in imp.notes)


def test_vllm_bench_lengths_are_the_counted_means_and_say_so():
    [imp], _ = read_file(IMPORTS / "vllm-bench-c1.json")
    doc = json.loads((IMPORTS / "vllm-bench-c1.json").read_text())
    assert imp.setting.prompt_tokens == round(doc["total_input_tokens"] / doc["completed"]) == 140
    assert imp.setting.output_tokens == 32 and imp.setting.counted is True
    assert imp.setting.variant_id("vllm-bench") == "vllm-bench_c1_in128"


def test_a_counted_prompt_length_names_no_prefill_measure():
    row = definition("llama-benchy", "pp_throughput")
    assert row is not None and "<P>" in row.about
    assert row.labkit_key(Setting(concurrency=1, prompt_tokens=512)) == "prefill_512"
    assert row.labkit_key(Setting(concurrency=1, prompt_tokens=512, counted=True)) is None


def test_imports_of_different_concurrencies_are_refused_by_the_gate(tmp_path):
    results = tmp_path / "results"
    import_file(IMPORTS / "vllm-bench-c1.json", lane="lab-c1", results=results)
    import_file(IMPORTS / "vllm-bench-c2.json", lane="lab-c2", results=results)
    with pytest.raises(CompareError, match="measurement plan"):
        compare("lab-c1", "lab-c2", results=results)
    forced = compare("lab-c1", "lab-c2", results=results, force=True)
    plan = next(i for i in forced.gate.items if i.fact == "measurement plan")
    assert plan.blocking and "imported.concurrency=1" in plan.a and "imported.concurrency=2" in plan.b


def test_imports_of_different_prompt_lengths_are_refused_by_the_gate(tmp_path):
    benchy = IMPORTS / "llama-benchy.json"
    doc = json.loads(benchy.read_text())
    for row in doc["benchmarks"]:
        row["prompt_size"] = 4096
    long = tmp_path / "long.json"
    long.write_text(json.dumps(doc))
    results = tmp_path / "results"
    import_file(benchy, lane="pp128", results=results)
    import_file(long, lane="pp4096", results=results)
    with pytest.raises(CompareError, match="measurement plan"):
        compare("pp128/llama-benchy_c1_pp128_tg32", "pp4096/llama-benchy_c1_pp4096_tg32", results=results)


def test_runs_of_one_command_whose_counts_drift_share_a_variant_and_compare(tmp_path):
    """The counted means move between runs of one command (a prompt of 142 tokens, an output ended early, more
    prompts): the same variant, and the gate lets them compare."""
    drift = {
        "num_prompts": 60,
        "date": "20261205-100000",
        "total_input_tokens": 852,
        "total_output_tokens": 180,
    }
    more = edited(IMPORTS / "vllm-bench-c1.json", tmp_path / "more.json", drift)
    results = tmp_path / "results"
    [a] = import_file(IMPORTS / "vllm-bench-c1.json", lane="few", results=results)
    [b] = import_file(more, lane="many", results=results)
    assert a.path.parent.name == b.path.parent.name == "vllm-bench_c1_in128"
    c = compare("few", "many", results=results, measures=["decode_c1"])
    assert not c.gate.blocked


def test_a_vllm_bench_rate_names_its_pacing_and_no_fixed_concurrency_measure(tmp_path):
    paced = edited(
        IMPORTS / "vllm-bench-c1.json", tmp_path / "r.json", {"request_rate": 4.0, "burstiness": 0.5}
    )
    [imp], _ = read_file(paced)
    assert (imp.setting.rate, imp.setting.schedule) == ("4", "gamma0.5")
    assert imp.setting.variant_id("vllm-bench") == "vllm-bench_c1_in128_r4_gamma0.5"
    [outcome] = import_file(paced, results=tmp_path / "results")
    info = read_run(outcome.path).measure_info
    assert not [row for row in info.values() if row.about]  # a rate's cap is not labkit's c1
