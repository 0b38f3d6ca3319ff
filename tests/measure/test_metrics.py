"""Prometheus parsing, counter deltas, speculative acceptance, prefix-cache hits, NFS mountstats."""

from pathlib import Path

import pytest

from labkit.measure.server import metrics as mx
from labkit.measure.telemetry import io_probe as iop

VLLM_BEFORE = """
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 500.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 250.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="4"} 0.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 16.0
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="m"} 500.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 300.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 100.0
"""

VLLM_AFTER = """
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 200.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 150.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 1000.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 750.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 700.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 500.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 290.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 240.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 230.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 170.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="4"} 0.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 9192.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 16.0
vllm:generation_tokens_total{engine="0",model_name="m"} 2000.0
vllm:generation_tokens_total{engine="1",model_name="m"} 1400.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 14.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 600.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 290.0
"""


def test_parse_labels_escapes_and_junk():
    s = mx.parse_prometheus('a{x="q\\"uote",y="b"} 1.5\nnot a metric line\nb 2 1700000000\n# c 3\nd NaN\n')
    assert s["a"] == [({"x": 'q"uote', "y": "b"}, 1.5)]
    assert s["b"] == [({}, 2.0)]
    assert "c" not in s
    assert mx.total(s, "d") is None


def test_acceptance_from_deltas_summed_over_engines():
    acc = mx.spec_acceptance(mx.parse_prometheus(VLLM_BEFORE), mx.parse_prometheus(VLLM_AFTER))
    # ΔD = 100 + 100 = 200, ΔA = 400 + 400 = 800, ΔT = 500 + 500 = 1000
    assert acc.drafts == 200 and acc.accepted == 800 and acc.draft_tokens == 1000
    assert acc.per_draft == pytest.approx(4.0)
    # τ per engine step: Δgen 1900 over 10 first steps + 490 later steps (every step, drafting or not)
    assert acc.length == pytest.approx(1900 / 500)
    assert acc.drafted_share == pytest.approx(200 / 490)
    assert acc.k == 5 and "5 per-position series" in acc.k_source  # positions 0..4
    assert acc.proposed_per_draft == pytest.approx(5.0)
    assert acc.rate == pytest.approx(0.8)
    assert acc.per_pos == pytest.approx([1.0, 0.8, 0.8, 0.55, 0.0])
    assert "4.00 of 5" in acc.describe() and "τ 3.80 tokens per engine step" in acc.describe()


def test_k_is_the_configured_integer_never_proposed_per_draft():
    before, after = (
        mx.parse_prometheus(VLLM_BEFORE),
        mx.parse_prometheus(VLLM_AFTER.replace("750.0", "600.0")),
    )
    acc = mx.spec_acceptance(before, after, 5, k_source="recipe --speculative-config num_speculative_tokens")
    assert acc.k == 5 and acc.k_source.startswith("recipe") and acc.proposed_per_draft == pytest.approx(4.25)
    other = mx.spec_acceptance(before, after, 6, k_source="recipe")
    assert other.k == 6 and "but /metrics has 5 per-position series" in other.k_source


def test_configured_k_from_recipe_engine_args():
    class Engine:
        def __init__(self, **args):
            self.args = args

        def arg(self, flag):
            return self.args.get(flag)

    ngram = Engine(**{"--speculative-config": ('{"method":"ngram","num_speculative_tokens":4}',)})
    assert mx.configured_k(ngram) == (4, "recipe --speculative-config num_speculative_tokens")
    assert mx.configured_k(Engine(**{"--speculative-num-draft-tokens": ("6",)}))[0] == 5
    assert mx.configured_k(Engine()) is None


def test_negative_delta_is_a_restart():
    with pytest.raises(mx.CounterReset):
        mx.spec_acceptance(mx.parse_prometheus(VLLM_AFTER), mx.parse_prometheus(VLLM_BEFORE))


def test_no_spec_counters_no_acceptance():
    assert mx.spec_acceptance(mx.parse_prometheus("x 1"), mx.parse_prometheus("x 2")) is None
    same = mx.parse_prometheus(VLLM_BEFORE)
    assert mx.spec_acceptance(same, same) is None  # nothing drafted in the window


def test_sglang_acceptance_from_verify_calls():
    before = mx.parse_prometheus(
        'sglang:generation_tokens_total{is_streaming="true"} 100\n'
        "sglang:spec_verify_calls_total 40\nsglang:spec_num_draft_tokens 4\n"
    )
    after = mx.parse_prometheus(
        'sglang:generation_tokens_total{is_streaming="true"} 1100\n'
        "sglang:spec_verify_calls_total 290\nsglang:spec_num_draft_tokens 4\n"
    )
    acc = mx.spec_acceptance(before, after)
    assert acc.length == pytest.approx(4.0)  # 1000 tokens / 250 verify calls
    assert acc.k == 3


def test_sglang_k_from_a_gauge_every_rank_exports_is_not_summed():
    ranks = 'sglang:spec_num_draft_tokens{tp_rank="0"} 6\nsglang:spec_num_draft_tokens{tp_rank="1"} 6\n'
    before = mx.parse_prometheus(
        "sglang:generation_tokens_total 100\nsglang:spec_verify_calls_total 40\n" + ranks
    )
    after = mx.parse_prometheus(
        "sglang:generation_tokens_total 1100\nsglang:spec_verify_calls_total 290\n" + ranks
    )
    assert mx.spec_acceptance(before, after).k == 5  # was 11: 6 + 6 - 1


def test_prefix_cache_delta():
    hits, queries = mx.prefix_cache(mx.parse_prometheus(VLLM_BEFORE), mx.parse_prometheus(VLLM_AFTER))
    assert (hits, queries) == (0, 8192)


def test_mountstats_parser_reads_nfs_mounts_only():
    text = (Path(__file__).parents[1] / "support" / "fixtures" / "mountstats.txt").read_text()
    mounts = iop.parse_mountstats(text)
    assert set(mounts) == {"/mnt/nas/hf", "/mnt/scratch"}
    assert mounts["/mnt/nas/hf"]["serverreadbytes"] == 500000
    assert mounts["/mnt/nas/hf"]["normalreadbytes"] == 1000
    assert mounts["/mnt/scratch"]["serverreadbytes"] == 900


def test_local_nfs_probe_delta(tmp_path):
    fixture = (Path(__file__).parents[1] / "support" / "fixtures" / "mountstats.txt").read_text()
    f = tmp_path / "mountstats"
    f.write_text(fixture)
    probe = iop.LocalNfsProbe(f)
    before = probe.sample()
    f.write_text(fixture.replace("1000 20 300 0 500000", "1000 20 300 0 758000"))
    d = iop.delta(before, probe.sample())
    assert iop.server_read_bytes(d) == 258000
    # a remount resets counters: reported, not silently zero
    f.write_text(fixture.replace("1000 20 300 0 500000", "1000 20 300 0 5"))
    assert iop.delta(before, probe.sample())["/mnt/nas/hf:serverreadbytes.reset"] == 1.0


def test_local_probe_without_file_is_empty(tmp_path):
    assert iop.LocalNfsProbe(tmp_path / "none").sample() == {}
