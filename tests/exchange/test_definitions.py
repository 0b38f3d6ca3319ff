"""The definition table: every row says what its figure is and where the tool defines it, docs/imports.md shows
the table exactly as labkit/exchange/definitions.toml holds it, and a row's labkit measure and conversion
are read for the setting of a result (concurrency 1 only, the prompt length filled in, none at a depth or
for a context-loading request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.exchange.definitions import definition, definitions, docs_table
from labkit.exchange.model import Setting
from labkit.measures import measure_info
from tools.docgen import section

DOC = Path(__file__).resolve().parents[2] / "docs" / "imports.md"


def test_docs_imports_md_carries_the_table_as_the_code_reads_it():
    shown = section(DOC.read_text(), "definitions")
    assert shown == docs_table(), (
        "docs/imports.md's definition table drifted from labkit/exchange/definitions.toml: run "
        ".venv/bin/python tools/imports_doc.py"
    )


def test_every_row_has_a_definition_a_citation_and_a_known_labkit_measure():
    for key, d in definitions().items():
        assert d.text and d.cite and d.unit, key
        if d.about:
            concrete = d.about.replace("<P>", "4096").replace("<N>", "2").replace("<D>", "8192")
            assert measure_info(concrete) is not None, f"{key}: about {d.about} is no labkit measure"


def test_a_rows_measure_depends_on_the_setting():
    tpot = definition("vllm-bench", "median_tpot_ms")
    assert tpot is not None
    assert tpot.labkit_key(Setting(concurrency=1)) == "decode_c1"
    assert tpot.labkit_key(Setting(concurrency=2)) is None  # per-request TPOT at c2 is no labkit measure
    assert tpot.converted(2.0) == 500.0 and tpot.converted(0.0) is None
    pp = definition("llama-benchy", "pp_throughput")
    assert pp is not None
    assert pp.labkit_key(Setting(concurrency=1, prompt_tokens=512)) == "prefill_512"
    assert pp.labkit_key(Setting(concurrency=1, prompt_tokens=512, depth=4096)) is None
    assert pp.labkit_key(Setting(concurrency=1, prompt_tokens=512, phase="context-load")) is None


@pytest.mark.parametrize("field", ["p99_ttft_ms", "p99.9_itl_ms", "p50_tpot_ms"])
def test_a_percentile_row_stands_for_every_percentile(field):
    d = definition("vllm-bench", field)
    assert d is not None and "percentile" in d.text and d.key_of(field) == f"vllm-bench:{field}"


def test_a_std_figure_is_defined_by_its_metrics_row():
    d = definition("llama-benchy", "tg_throughput_std")
    assert d is not None and "standard deviation" in d.text and d.about == ""
    assert definition("vllm-bench", "median_tpot_ms_std") is None
