"""The bench notebook with a `content` parameter (docs/measurement.md, "Prompt content"): papermill, a real
kernel, a sim lane whose acceptance per category is known, three runs on one boot; the executed notebook shows
the table "decode c1 and acceptance by prompt content" with an interval per category, and the runs store it."""

from __future__ import annotations

import re

import pytest

from labkit import notebooks as nbk
from labkit.store import load_results
from tests.support.lanes import NO_TELEMETRY, papermill_bench, sim_recipe
from tests.support.workers import free_port

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORTS = (18920, 18939)  # this file's sim ports, clear of the other tests' ranges
# every draft of a code prompt accepted, none of a prose prompt; the decode phase's own prose: half of them
SETTINGS = {
    "spec_method": "mtp",
    "spec_k": 3,
    "spec_accept": [0.5, 0.5, 0.5],
    "spec_accept_code": [1.0, 1.0, 1.0],
    "spec_accept_prose": [0.0, 0.0, 0.0],
}


def test_papermill_with_a_content_parameter_shows_the_content_table(tmp_path):
    recipes = tmp_path / "recipes"
    sim_recipe(
        recipes / "contentsim",
        port=free_port(*PORTS),
        settings=SETTINGS,
        measure=f"seed = 4\n{NO_TELEMETRY}",
    )
    args = ["-p", "recipe", "contentsim", "-p", "content", "prose,code", "-p", "runs", "3"]
    proc, out = papermill_bench(tmp_path, recipes, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = nbk.shown_tables(out)
    (table,) = [t for t in shown if t.startswith("Decode c1 and acceptance by prompt content")]
    lane = re.compile(r"^sim test lane \(sim\) +(\w+) ")
    rows = {m.group(1): line for line in table.splitlines() if (m := lane.match(line))}
    assert list(rows) == ["synthetic", "prose", "code"]
    for line in rows.values():  # decode c1 and τ each a 95 % interval over the three runs on one boot
        assert len(re.findall(r"\d[\d.,]* \[[\d.,]+, [\d.,]+\] n=3 runs, 1 boot", line)) >= 2, line
    assert "content        c1 on corpus prompts: prose, code, 2 turns each" in out.read_text()  # the plan
    data = load_results(tmp_path / "results")
    assert len(data.runs) == 3 and set(data.runs["status"]) == {"complete"}
    m = data.measures.groupby("measure")["value"].mean()
    assert m["accept_per_draft@code"] == 3 and m["accept_per_draft@prose"] == 0
    # the truths: the test preset's 200 t/s at 1.5 tokens a step, so a step takes 2.5 / 200 s; 16 tokens are the
    # first and 15 more, in 4 steps on code (4, 4, 4, 3) and 15 on prose
    assert m["decode_c1@code"] == pytest.approx(15 / (4 * 2.5 / 200), rel=0.03)  # 300 t/s
    assert m["decode_c1@prose"] == pytest.approx(200 / 2.5, rel=0.03)  # 80 t/s
    doc = next(iter(data.docs.values()))
    assert doc.plan.measure["content"] == ["prose", "code"]
    assert doc.provenance.raw["prompt_corpus"]["categories"] == ["prose", "code"]
