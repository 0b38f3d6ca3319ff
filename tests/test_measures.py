"""The measure catalogue (docs/measurement.md, "The measure catalogue"): every key a real sim lane's summary
emits is a row of it, every row is complete, and the headline queries give what the plan, the sweep plot and
`labkit compare` each relied on before the catalogue existed."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from labkit import lab, report
from labkit.measure import RunSummary
from labkit.measure.summary.counters import nfs_summary
from labkit.measure.workloads import WORKLOADS
from labkit.measures import (
    ADDED_ROWS,
    CATALOGUE,
    PLACEHOLDER,
    Measure,
    MeasureKey,
    catalogue,
    content_key,
    decode_key,
    depth_key,
    direction,
    docs_table,
    families,
    headline,
    idle_key,
    is_headline,
    label,
    measure_info,
    measure_key,
    order_key,
    parse_key,
    prefill_key,
    title,
    turn_key,
    unit,
)
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.store import load_results
from tests.support.lanes import sim_recipe
from tools.docgen import section

PORT = 18793
SHIM = Path(__file__).resolve().parent / "support" / "nvidia_smi_shim.py"
DOC = Path(__file__).resolve().parents[1] / "docs/measurement.md"
SPEC = {"spec_method": "mtp", "spec_k": 2, "spec_accept": [0.8, 0.5], "cold_requests": 1}
# the engine's own per-request figures, as the vLLM lanes turn them on (docs/measurement.md, "Per-request server truth")
SPEC |= {"enable_per_request_metrics": True, "per_request_spec_decode_metrics": "summary"}
# the roofline's stand-ins, so its decode ceilings and shares are emitted (docs/roofline.md, "The simulator")
SPEC |= {"roofline_bytes_per_token": 1e8, "memory_bandwidth": 1e11}
# a short agentic session and one idle turn, so their rows are emitted too (docs/measurement.md, "Agentic sessions")
MEASURE = 'telemetry_period = 0.2\ncontent = ["code"]\nidle_s = [1]\n'
MEASURE += "agentic = { turns = 2, tool_tokens = 64, answer_tokens = 8 }\n"
MEASURE += "depth = { tokens = [0, 256], prompt_tokens = 16, output_tokens = 8 }\n"  # and its context depths
MEASURE += "canary = { requests = 2, output_tokens = 16 }\n"  # and the slow-state canary
# and an open-loop load level with an SLO
MEASURE += (
    'load = { rate = [20], arrival = "constant", requests = 8, prompt_tokens = 32, output_tokens = 8 }\n'
)
MEASURE += "slo = { ttft_s = 1.0 }"
PREFILL_ROOFLINE = ("prefill_<P>_ceiling", "prefill_<P>_compute")
# rows the sim lane here cannot emit: no NFS mount on this machine, no drafted-share counter in the simulator
NOT_ON_THE_SIM_LANE = {
    "accept_drafted_share",
    "accept_drafted_share@<C>",
    "nfs_read_bytes",
    "nfs_read_bytes_per_completion",
    "canary_ms_before",  # the lane's one run is the boot's first: its cold turn comes before any canary
    "load_capacity_streams",  # a capacity search (tests/measure/test_load_profiles.py), not this lane's levels
    "load_capacity_rate",
    # agentic session levels (tests/measure/test_load_sessions.py), one kind of level per recipe
    "load_capacity_sessions",
    "load_turn_ttft_t<T>",
    "load_hit_share",
    "load_eviction_sessions",
    "staging_s",  # a lane with a view to stage: the run folder's staging.json (store/load.py lane_rows)
    # prefill under decode (tests/measure/test_interference.py), a workload the sim lane does not ask for
    *WORKLOADS["interference"].measures,
    # the compute ceiling needs a probed matmul: a real engine's lane (tests/lab/test_vllm_sweep.py)
    *PREFILL_ROOFLINE,
}
# the headline rule each caller kept before the catalogue: labkit compare's default measures (and, with prompt
# content, decode c1 and acceptance length per category)
COMPARE_HEADLINE = re.compile(
    r"^(decode_c\d+(_agg)?|prefill_\d+|ttft_c1|accept_length|(decode_c1|accept_length)@code)$"
)


@dataclass(frozen=True)
class SimRun:
    keys: set[str]
    plan_headline: tuple[str, ...]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> SimRun:
    """One measured run of a sim lane with speculation, c1 and c2, a prefill length and node telemetry (the
    nvidia-smi shim on PATH stands in for a GPU), as `labkit run bench` measures it."""
    tmp = tmp_path_factory.mktemp("catalogue")
    shim = tmp / "shim"
    shim.mkdir()
    (shim / "nvidia-smi").write_text(f'#!/bin/sh\nexec {sys.executable} {SHIM} "$@"\n')
    (shim / "nvidia-smi").chmod(0o755)
    folder = tmp / "recipes" / "catalogue-sim"
    sim_recipe(folder, port=PORT, settings=SPEC, measure=MEASURE)
    recipe = folder / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("concurrency = [1]", "concurrency = [1, 2]"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{shim}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin")
        mp.setenv("LABKIT_RECIPES", str(tmp / "recipes"))
        plan = lab.plan("catalogue-sim")
        done = lab.measure(plan, results=tmp / "results", progress=False)
    doc = json.loads((done.run_dirs[0] / "run.json").read_text())
    stored = load_results(tmp / "results").measures  # with the lane's timings the run folder keeps (boot_s)
    return SimRun(set(doc["summary"]["measures"]) | set(stored["measure"]), plan.measure.headline_measures())


def _nfs_keys() -> set[str]:
    s = RunSummary(n_ok=4)
    nfs_summary(s, {"n1-nfs": {"/nas:serverreadbytes": 5e6}})
    return set(s.measures)


def test_every_key_the_sim_lane_emits_matches_one_catalogue_row(sim_run):
    keys = sim_run.keys | _nfs_keys()
    assert {"decode_c1_cold", "decode_c2_agg", "accept_length", "energy_per_token_decode"} <= keys
    assert sorted(k for k in keys if measure_info(k) is None) == []
    for key in keys:  # one row each: no two patterns claim a key
        assert [row.key for row in CATALOGUE if row.regex().fullmatch(key)] == [measure_info(key).key]
    seen = {measure_info(k).key for k in keys}
    # no row is left unused
    assert (
        {row.key for row in CATALOGUE} - seen
        == {
            "accept_drafted_share",
            "accept_drafted_share@<C>",
            "canary_ms_before",  # the lane's one run is the boot's first (tests/lab/test_canary.py has a second)
            "load_capacity_streams",
            "load_capacity_rate",
            "load_capacity_sessions",
            "load_turn_ttft_t<T>",
            "load_hit_share",
            "load_eviction_sessions",
            "staging_s",  # a lane with a view to stage (tests/report/test_measured_beside.py reads boot_s beside it)
            *WORKLOADS["interference"].measures,  # prefill under decode: the sim lane does not ask for it
            *PREFILL_ROOFLINE,  # a probed matmul: a real engine's lane
        }
    )
    assert {measure_info(k).key for k in sim_run.keys} >= {r.key for r in CATALOGUE} - NOT_ON_THE_SIM_LANE


def test_every_row_has_a_title_a_unit_and_a_direction():
    assert len({row.key for row in CATALOGUE}) == len(CATALOGUE)
    for row in CATALOGUE:
        assert row.title and row.unit and row.direction in ("higher", "lower", "none"), row
        assert set(PLACEHOLDER.findall(row.title)) <= set(PLACEHOLDER.findall(row.key)), row
    assert title("prefill_12600") == "prefill 12,600-token prompt" and unit("prefill_12600") == "t/s"
    assert label("decode_c2_agg") == "decode c2 aggregate (t/s)" and label("decode_c1") == "decode c1 (t/s)"
    assert title("accept_pos_3") == "accepted at draft position 3" and unit("sm_clock_decode_median") == "MHz"
    assert label("not_a_measure") == title("not_a_measure") == "not_a_measure" and unit("not_a_measure") == ""
    assert (
        label("decode_c1@code") == "decode c1, code prompts (t/s)"
        and title("ttft_c1@chat") == "TTFT c1, chat prompts"
    )
    assert measure_info("decode_c1@poetry") is None and order_key("accept_length@prose") < order_key(
        "accept_length@chat"
    )


def test_directions_energy_per_token_is_lower_is_better(sim_run):
    energy = [k for k in sim_run.keys if k.startswith("energy_per_token_")]
    assert energy and all(direction(k) == "lower" and unit(k) == "J/tok" for k in energy)
    assert direction("decode_c2_span") == "higher" and direction("prefill_512_ttft") == "lower"
    assert (
        direction("decode_c2_overlap") == direction("accept_length") == direction("kv_pool_tokens") == "none"
    )
    assert direction("not_a_measure") == "none"
    for key in sim_run.keys:  # labkit compare judges by the catalogue's direction
        assert report.compare.direction(key) == direction(key)


def test_headline_queries_give_what_each_caller_relied_on(sim_run):
    keys = sim_run.keys
    # labkit compare: every headline measure both sides have
    assert set(headline(keys)) == {k for k in keys if COMPARE_HEADLINE.match(k)}
    assert set(headline(keys)) == {
        "decode_c1",
        "decode_c2_agg",
        "prefill_512",
        "ttft_c1",
        "accept_length",
        "decode_c1@code",
        "accept_length@code",
    }
    # the plan (measure.target_ci's default measures): the headline rates, in catalogue order
    assert sim_run.plan_headline == ("decode_c1", "decode_c2_agg", "prefill_512", "decode_c1@code")
    assert sorted(headline(keys, rates_only=True), key=order_key) == list(sim_run.plan_headline)
    plan = MeasurePlan("chat", 1, DecodePlan((4, 1), 2, 8, 0), PrefillPlan((12600, 4096), 1), 10.0)
    assert plan.headline_measures() == ("decode_c4_agg", "decode_c1", "prefill_12600", "prefill_4096")
    no_decode = MeasurePlan("chat", 1, DecodePlan((1,), 0, 8, 0), PrefillPlan((4096,), 1), 10.0)
    assert no_decode.headline_measures() == ("prefill_4096",)
    # a sweep plot: decode c1, then the aggregates by N, then prefill by P
    more = keys | {"decode_c16_agg", "prefill_12600", "prefill_4096", "decode_c16_span"}
    assert report.plots.sweep_measures(more) == [
        "decode_c1",
        "decode_c2_agg",
        "decode_c16_agg",
        "prefill_512",
        "prefill_4096",
        "prefill_12600",
        "decode_c1@code",
    ]
    assert not is_headline("decode_c1_cold") and not is_headline("ttft_c1", rates_only=True)


def test_a_prefill_key_gives_back_its_prompt_length_and_no_other_key_does():
    from labkit.measures import prefill_key, prefill_tokens

    assert prefill_tokens(prefill_key(12600)) == 12600
    assert [
        prefill_tokens(k) for k in ("prefill_4096_raw", "prefill_4096_ttft", "decode_c1", "prefill_")
    ] == [None] * 4


# one key of every family the lab record holds, as stored: new runs must write exactly these strings
STORED = (
    "decode_c1",
    "decode_c1_cold",
    "decode_c2_agg",
    "decode_c2_span",
    "decode_c2_overlap",
    "decode_c2_concurrency",
    "decode_c2_engine",
    "decode_c1_engine_gap",
    "decode_c2_ttft_engine_gap",
    "prefill_4096",
    "prefill_12600_raw",
    "prefill_4096_ttft",
    "ttft_c1",
    "ttft_c1_server",
    "accept_pos_0",
    "accept_length",
    "prefix_cache_hit_ratio",
    "kv_pool_tokens",
    "nfs_read_bytes_per_completion",
)
# and the families the sim lane above writes, which the record has no run of yet
WRITTEN = (
    "decode_c1@code",
    "accept_length_stream@chat",
    "agentic_ttft_t3",
    "agentic_hit_expected_t2",
    "idle_30_decode",
    "idle_1_slowdown",
    "depth_8192_ttft_cached",
    "depth_0_ttft",
    "depth_256_hit_expected_cached",
    "depth_8192_ttft_gain",
    "energy_per_token_prefill_512",
    "decode_c2_accept_per_draft",
    "canary_ms_before",
)


def _stored_keys() -> set[str]:
    """Every summary key the committed run folders hold (read only; imported figures are `<format>:<field>`)."""
    root = Path(__file__).resolve().parents[1] / "results"
    keys: set[str] = set()
    for path in root.rglob("run.json"):
        keys |= set((json.loads(path.read_text()).get("summary") or {}).get("measures") or {})
    return keys


@pytest.mark.parametrize("key", STORED + WRITTEN)
def test_a_key_reads_back_as_its_family_and_axes_and_is_written_the_same(key):
    parsed = parse_key(key)
    assert parsed is not None and str(parsed) == key
    assert MeasureKey(parsed.family, parsed.axes) == parsed and measure_info(key) == parsed.row


def test_every_key_of_the_lab_record_round_trips_and_only_imported_figures_are_outside():
    keys = _stored_keys()
    assert set(STORED) <= keys  # the list above is what the record holds
    outside = {k for k in keys if parse_key(k) is None}
    assert all(":" in k for k in outside), sorted(k for k in outside if ":" not in k)
    assert [k for k in keys - outside if str(parse_key(k)) != k] == []


def test_the_helpers_write_the_stored_strings():
    assert decode_key(1) == "decode_c1" and decode_key(2) == "decode_c2_agg"
    assert prefill_key(4096, "ttft") == "prefill_4096_ttft" and prefill_key(12600) == "prefill_12600"
    assert depth_key("ttft", 8192, "cached") == "depth_8192_ttft_cached"
    assert (
        depth_key("hit", 0, "uncached") == "depth_0_hit"
        and depth_key("ttft_gain", 8192) == "depth_8192_ttft_gain"
    )
    assert content_key("decode_c1", "code") == "decode_c1@code" and turn_key("ttft", 3) == "agentic_ttft_t3"
    assert (
        idle_key("decode", 30.0) == "idle_30_decode"
        and measure_key("accept_pos_<i>", position=2) == "accept_pos_2"
    )
    parsed = parse_key("depth_8192_prefill_cached")
    assert parsed is not None and (parsed.family, parsed.get("depth"), parsed.get("cache")) == (
        "depth_<D>_prefill<K>",
        8192,
        "cached",
    )
    assert parse_key("depth_8192_prefill").get("cache") == "uncached"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("key", "axes", "shown"),
    [
        ("idle_0.5_ttft", {"idle": 0.5}, "TTFT after 0.5 s idle"),
        ("decode_c1@rate=0.5", {"rate": 0.5}, "decode c1, at 0.5 requests/s"),
        ("ttft_c1@stat=p90", {"stat": "p90"}, "TTFT c1, p90"),
        (
            "prefill_4096_ttft@load=2.25",
            {"prompt": 4096, "load": 2.25},
            "TTFT of the 4,096-token prompt, load 2.25",
        ),
        ("decode_c1@code@rate=0.00001@stat=p99.9", {"content": "code", "rate": 1e-05, "stat": "p99.9"}, None),
        ("decode_c2_agg@stat=mean", {"concurrency": 2, "stat": "mean"}, "decode c2 aggregate, mean"),
        ("ttft_c1@stat=p0.1", {"stat": "p0.1"}, "TTFT c1, p0.1"),
    ],
)
def test_decimals_and_qualifiers_round_trip(key, axes, shown):
    parsed = parse_key(key)
    assert parsed is not None and dict(parsed.axes) == axes and str(parsed) == key
    assert measure_key(parsed.family, **axes) == key
    if shown:
        assert title(key) == shown
    # a qualified key keeps its family's unit and direction but is no headline of its own
    assert unit(key) == parsed.row.unit and direction(key) == parsed.row.direction and not is_headline(key)


def test_a_value_has_one_spelling():
    assert measure_key("idle_<S>_ttft", idle=30.0) == measure_key("idle_<S>_ttft", idle=30) == "idle_30_ttft"
    assert measure_key("decode_c1", rate=0.1 + 0.2) == "decode_c1@rate=0.30000000000000004"
    assert parse_key("decode_c1@rate=0.30000000000000004").get("rate") == 0.1 + 0.2  # type: ignore[union-attr]
    assert order_key("ttft_c1@stat=p50") < order_key("ttft_c1@stat=p90") < order_key("ttft_c1@stat=p99.9")
    assert (
        order_key("depth_4096_ttft_cached")
        < order_key("depth_8192_ttft")
        < order_key("depth_8192_ttft_cached")
    )


@pytest.mark.parametrize(
    "key",
    [
        "decode_c1.5_agg",  # a concurrency is a count
        "decode_c01_agg",  # no leading zero
        "idle_30.0_ttft",  # no trailing zero
        "idle_1e-05_ttft",  # no exponent
        "ttft_c1@stat=p100",  # a percentile lies between 0 and 100
        "ttft_c1@stat=p0",
        "ttft_c1@stat=p050",
        "ttft_c1@stat=q5",
        "ttft_c1@rate=-1",
        "ttft_c1@stat=p90@rate=1",  # qualifiers in their order: rate, load, stat
        "decode_c1@poetry",
        "depth_8192_ttft_warm",
        "vllm-bench:p99_ttft_ms",  # an imported figure keeps its tool's name
    ],
)
def test_a_malformed_key_has_no_family(key):
    assert parse_key(key) is None and measure_info(key) is None and title(key) == key


@pytest.mark.parametrize(
    ("family", "axes"),
    [
        ("decode_c<N>_agg", {"concurrency": 1.5}),
        ("decode_c<N>_agg", {"concurrency": -2}),
        ("decode_c<N>_agg", {"concurrency": True}),
        ("decode_c<N>_agg", {}),  # its axis missing
        ("decode_c1", {"depth": 8192}),  # an axis its family does not hold
        ("idle_<S>_ttft", {"idle": float("nan")}),
        ("decode_c1", {"rate": float("inf")}),
        ("decode_c1", {"stat": "p0"}),
        ("depth_<D>_ttft<K>", {"depth": 8192, "cache": "warm"}),
        ("decode_c<N>_median", {"concurrency": 2}),  # no such family
    ],
)
def test_a_key_that_cannot_be_is_refused_when_written(family, axes):
    with pytest.raises(ValueError):
        measure_key(family, **axes)


def test_every_row_has_a_definition_and_docs_measurement_md_shows_the_catalogue():
    assert all(row.definition and "<" not in row.definition for row in CATALOGUE)
    assert set(families()) == {row.key for row in CATALOGUE}
    doc = DOC.read_text()
    shown = section(doc, "catalogue")
    assert shown == docs_table(), (
        "docs/measurement.md's catalogue table drifted from labkit/measures.toml: run "
        ".venv/bin/python tools/measures_doc.py"
    )
    assert (
        len(shown.splitlines()) == len(CATALOGUE) + 2
        and "`decode_c<N>_agg` | decode c`<N>` aggregate" in shown
    )


ECHO_ROWS = (
    Measure("echo_c<N>_ms", "echo c<N> TTFT", "ms", "lower", "median TTFT of the echo requests"),
    Measure("echo_total", "echo requests", "requests", "none", "how many echo requests were sent"),
)


def test_a_registered_row_is_read_by_every_lookup_and_gone_when_unregistered(monkeypatch):
    """A workload defined outside labkit brings its rows in ADDED_ROWS (docs/architecture.md, "How to add a
    measure"): they come after the shipped rows, and no lookup answers from a catalogue cached before."""
    assert measure_info("echo_c2_ms") is None and title("echo_c2_ms") == "echo_c2_ms"  # looked up, cached
    shipped_table = docs_table()
    with monkeypatch.context() as m:
        m.setitem(ADDED_ROWS, "echo", ECHO_ROWS)
        assert catalogue() == CATALOGUE + ECHO_ROWS and families()["echo_total"] == ECHO_ROWS[1]
        assert label("echo_c2_ms") == "echo c2 TTFT (ms)" and direction("echo_c2_ms") == "lower"
        assert title("echo_c2_ms@stat=p90") == "echo c2 TTFT, p90" and unit("echo_total") == "requests"
        assert measure_key("echo_c<N>_ms", concurrency=4) == "echo_c4_ms"
        assert parse_key("echo_c4_ms") == MeasureKey("echo_c<N>_ms", (("concurrency", 4),))
        keys = ["echo_total", "echo_c16_ms", "not_a_measure", "decode_c1", "echo_c2_ms"]
        assert sorted(keys, key=order_key) == [
            "decode_c1",
            "echo_c2_ms",
            "echo_c16_ms",
            "echo_total",
            "not_a_measure",
        ]
        assert docs_table() == shipped_table  # the docs show the shipped rows only
    assert measure_info("echo_c2_ms") is None and catalogue() == CATALOGUE
    with pytest.raises(ValueError, match="echo_c<N>_ms"):
        measure_key("echo_c<N>_ms", concurrency=4)


def test_a_registered_row_never_takes_a_shipped_family(monkeypatch):
    monkeypatch.setitem(ADDED_ROWS, "echo", (replace(ECHO_ROWS[0], key="decode_c1"),))
    with pytest.raises(ValueError, match="registered twice: decode_c1"):
        title("decode_c1")
