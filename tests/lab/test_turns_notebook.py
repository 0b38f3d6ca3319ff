"""The bench notebook on a lane with agentic sessions, an idle turn and context depths (docs/measurement.md,
"Agentic sessions", "Idle turns", "Context depth"): papermill, a real kernel, a sim lane with prefix caching whose
truths are known; the executed notebook shows the table "TTFT by turn" with a row per turn and one for the idle
length, the table by depth for the notebook's `depth` parameter, and the per-request agreement with the engine's
own figures."""

from __future__ import annotations

import re

from labkit import notebooks as nbk
from labkit.store import load_results
from tests.support.lanes import papermill_bench, sim_recipe
from tests.support.workers import free_port

PORTS = (18940, 18959)  # this file's sim ports, clear of the other tests' ranges
SESSION = (
    'agentic = { turns = 3, tool_tokens = 256, answer_tokens = 8, sessions = 1 }\nidle_s = [1]\napi = "chat"'
)


def test_papermill_on_an_agentic_lane_shows_the_ttft_by_turn_table(tmp_path):
    recipes = tmp_path / "recipes"
    sim_recipe(
        recipes / "turnsim",
        port=free_port(*PORTS),
        settings={"prefix_caching": True},
        measure=SESSION,
        args='"--enable-per-request-metrics" = true',
    )
    proc, out = papermill_bench(tmp_path, recipes, "-p", "recipe", "turnsim", "-p", "depth", "0,512")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (table,) = [t for t in nbk.shown_tables(out) if t.startswith("TTFT by turn")]
    rows = [line for line in table.splitlines() if line.startswith("sim test lane")]
    assert len(rows) == 4, table  # turns 1-3, then the idle length
    assert [re.search(r"\bturn (\d)\b|idle (\d+) s", r) is not None for r in rows] == [True] * 4, table
    (table,) = [t for t in nbk.shown_tables(out) if t.startswith("TTFT, prefill and decode by depth")]
    rows = [line for line in table.splitlines() if line.startswith("sim test lane")]
    assert [re.search(r"\b(0 uncached|512 uncached|512 cached)\b", r).group(1) for r in rows] == [
        "0 uncached",
        "512 uncached",
        "512 cached",
    ], table
    # the per-request agreement cell: client - engine, read back from the stored summary
    assert re.search(r": client − engine per request: c1 \(n=\d+\): TTFT [+-]\d", out.read_text()), (
        proc.stdout[-2000:]
    )
    data = load_results(tmp_path / "results")
    m = data.measures.groupby("measure")["value"].mean()
    # the sim's prefix cache: turn 1 hits nothing, every later turn the previous prompt in whole blocks
    assert m["agentic_hit_t1"] == 0 and m["agentic_hit_t2"] > 0 and m["agentic_hit_agreement"] == 1
    assert "idle_1_ttft" in m
    assert m["depth_512_hit"] == 0 and m["depth_512_hit_cached"] > 0 and m["depth_hit_agreement"] == 1
