"""labkit.sim pieces without a server: config, tokenizer, engine schedule, prefix cache, spec accounting."""

from __future__ import annotations

import pytest

from labkit.sim import tokenizer
from labkit.sim.config import PRESETS, SimConfigError, batch_beta, build_config
from labkit.sim.engine import SimEngine

# ---- config ------------------------------------------------------------------------------------


def test_unknown_set_key_is_named_with_suggestion():
    with pytest.raises(SimConfigError) as e:
        build_config("test", sets=["decode_tp=10"])
    assert "decode_tp" in str(e.value) and "decode_tps" in str(e.value)


def test_set_bad_value_names_key():
    with pytest.raises(SimConfigError, match="decode_tps"):
        build_config("test", sets=["decode_tps=fast"])
    with pytest.raises(SimConfigError, match="expects key=value"):
        build_config("test", sets=["decode_tps"])
    with pytest.raises(SimConfigError, match="preset"):
        build_config("nope")


def test_set_types_and_order():
    cfg = build_config(
        "test",
        sets=[
            "decode_tps=12.5",
            "prefix_caching=false",
            "spec_method=mtp",
            "spec_k=2",
            "spec_accept=0.9,0.5",
            "kv_cache_tokens=10,000",
        ],
        model_name="m",
    )
    assert cfg.decode_tps == 12.5 and cfg.prefix_caching is False and cfg.spec_accept == [0.9, 0.5]
    assert cfg.kv_cache_tokens == 10000 and cfg.model_name == "m"


def test_config_file(tmp_path):
    f = tmp_path / "sim.toml"
    f.write_text('decode_tps = 99\nflavor = "sglang"\n')
    cfg = build_config("test", file=f, sets=["decode_tps=7"])
    assert cfg.decode_tps == 7 and cfg.flavor == "sglang"
    f.write_text("decode_tpz = 1\n")
    with pytest.raises(SimConfigError, match=r"sim\.toml.*decode_tpz"):
        build_config(file=f)
    f.write_text('decode_tps = "x"\n')
    with pytest.raises(SimConfigError, match="decode_tps"):
        build_config(file=f)


@pytest.mark.parametrize(
    "sets,key",
    [
        (["spec_method=dspark", "spec_k=2", "spec_accept=0.5"], "spec_accept"),
        (["spec_method=dspark", "spec_k=2", "spec_accept=0.5,0.7"], "non-increasing"),
        (["flavor=tgi"], "flavor"),
        (["decode_tps=0"], "decode_tps"),
        (["kv_log_form=three"], "kv_log_form"),
    ],
)
def test_validation(sets, key):
    with pytest.raises(SimConfigError, match=key):
        build_config("test", sets=sets)


def test_presets_mirror_lab_note():
    stock = build_config("dsv41-stock")
    assert (
        stock.model_name == "sim-dsv41"
        and stock.kv_cache_tokens == 8_726_823
        and stock.max_model_len == 131072
    )
    # c1 29.7, c2 aggregate 45.6 (22.8 per stream), cold 20.0
    assert 1 / stock.step_time(1, False) == pytest.approx(29.7)
    assert 2 / stock.step_time(2, False) == pytest.approx(45.6)
    assert 1 / stock.step_time(1, True) == pytest.approx(20.0)
    ds = build_config("dsv41-stock-dspark")
    assert ds.spec_k == 5 and sum(ds.spec_accept) == pytest.approx(4.79)
    # mean tokens/s = (1 + E[accepted]) / step time
    assert (1 + 4.79) / ds.step_time(1, False) == pytest.approx(52.9)
    assert 2 * (1 + 4.79) / ds.step_time(2, False) == pytest.approx(66.4)
    assert batch_beta(10, 20) == 0.0
    assert set(PRESETS) >= {"dsv41-stock", "dsv41-stock-dspark", "test"}


# ---- tokenizer ---------------------------------------------------------------------------------


def test_tokenizer_rules():
    assert tokenizer.pieces("Hello, world!") == ["Hello", ",", "world", "!"]
    assert tokenizer.pieces("internationalization") == ["internat", "ionaliza", "tion"]
    assert len(tokenizer.encode_prompt("a b c")) == 4  # BOS
    assert tokenizer.encode_prompt([5, 6, 7]) == [5, 6, 7]
    one = tokenizer.encode_chat([{"role": "user", "content": "a b c"}])
    assert len(one) == 3 + 6
    two = tokenizer.encode_chat(
        [
            {"role": "system", "content": "x"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]
    )
    assert len(two) == 1 + (3 + 1) + (3 + 2) + 2
    assert tokenizer.encode("same words") == tokenizer.encode("same   words")
    for w in tokenizer.WORDS:  # generated text re-tokenises to one token per generated token
        assert len(tokenizer.pieces(" " + w)) == 1
    with pytest.raises(tokenizer.TokenizeError):
        tokenizer.encode_chat([{"content": "no role"}])


# ---- engine --------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _engine(*sets):
    clock = FakeClock()
    return SimEngine(build_config("test", sets=list(sets)), clock), clock


def test_prefix_cache_nonce_first_vs_last():
    eng, clock = _engine()
    text = " ".join(f"w{i}" for i in range(400))
    base = tokenizer.encode_chat([{"role": "user", "content": text}])
    r1 = eng.admit(base, 4, 0, True, "chat", True, "a")
    assert r1.cached_tokens == 0
    eng.first_token(r1, r1.t_prefill_end, r1.t_prefill_end)
    eng.finish(r1, "finished", "length")
    again = eng.admit(base, 4, 0, True, "chat", True, "b")
    assert again.cached_tokens == (len(base) - 1) // 16 * 16  # whole blocks, never the last token
    assert again.t_prefill_end - again.t_prefill_start < (r1.t_prefill_end - r1.t_prefill_start) / 10
    first = eng.admit(
        tokenizer.encode_chat([{"role": "user", "content": "n0nce " + text}]), 4, 0, True, "chat", True, "c"
    )
    assert first.cached_tokens == 0
    last = eng.admit(
        tokenizer.encode_chat([{"role": "user", "content": text + " n0nce"}]), 4, 0, True, "chat", True, "d"
    )
    assert last.cached_tokens >= len(base) - 32
    assert eng.c.prefix_hits == again.cached_tokens + last.cached_tokens
    assert eng.c.prefix_queries == 4 * len(base) + 2


def test_prefix_cache_off_and_flush():
    eng, _ = _engine("prefix_caching=false")
    ids = list(range(200, 300))
    r = eng.admit(ids, 2, 0, True, "completions", False, "a")
    eng.first_token(r, 0, 0)
    assert eng.admit(ids, 2, 0, True, "completions", False, "b").cached_tokens == 0
    eng2, _ = _engine()
    r = eng2.admit(ids, 2, 0, True, "completions", False, "a")
    eng2.first_token(r, 0, 0)
    eng2.finish(r, "finished", "length")
    assert eng2.flush_cache()
    assert eng2.admit(ids, 2, 0, True, "completions", False, "b").cached_tokens == 0


def test_prefill_is_serialised_and_ttft_is_prefill():
    eng, clock = _engine("prefill_tps=1000")
    a = eng.admit(list(range(100, 600)), 2, 0, True, "completions", False, "a")
    b = eng.admit(list(range(1000, 1500)), 2, 0, True, "completions", False, "b")
    assert a.t_prefill_end - clock.t == pytest.approx(0.5)
    assert b.t_prefill_start == pytest.approx(a.t_prefill_end)
    assert b.t_prefill_end - clock.t == pytest.approx(1.0)


def test_batch_effect_on_step_time():
    eng, clock = _engine("decode_tps=100", "batch_beta=0.5", "prefill_tps=1e9")
    a = eng.admit([200] * 10, 50, 0, True, "chat", True, "a")
    eng.first_token(a, a.t_prefill_end, a.t_prefill_end)
    assert eng.next_target(a, 0.0) == pytest.approx(0.01)
    b = eng.admit([300] * 10, 50, 0, True, "chat", True, "b")
    eng.first_token(b, b.t_prefill_end, b.t_prefill_end)
    assert eng.next_target(a, 0.0) == pytest.approx(0.015)
    eng.finish(b, "finished", "length")
    assert eng.next_target(a, 0.0) == pytest.approx(0.01)


def test_cold_requests():
    eng, _ = _engine("cold_requests=1", "cold_decode_tps=50", "decode_tps=100")
    a = eng.admit([200] * 10, 5, 0, True, "chat", True, "a")
    b = eng.admit([300] * 10, 5, 0, True, "chat", True, "b")
    assert a.cold and not b.cold
    assert eng.cfg.step_time(1, a.cold) == pytest.approx(0.02)


def test_spec_steps_and_counters_are_consistent():
    eng, _ = _engine("spec_method=dspark", "spec_k=3", "spec_accept=0.9,0.6,0.3")
    recs = []
    for i in range(5):
        r = eng.admit([400 + i] * 20, 300, 0, True, "chat", True, str(i))
        eng.first_token(r, 0, 0)
        sizes = []
        while r.completion_tokens < r.target_tokens:
            before_acc, remaining = r.accepted, r.target_tokens - r.completion_tokens
            sizes.append(eng.step(r, 0, 0))
            # a step emits 1 + its accepted drafts, cut only at the request's end
            assert sizes[-1] == min(1 + r.accepted - before_acc, remaining)
        eng.finish(r, "finished", "length")
        assert r.completion_tokens == 300 == 1 + sum(sizes)
        assert r.steps == len(sizes)
        recs.append(r)
    c = eng.c
    assert c.spec_drafts == sum(r.steps for r in recs) == sum(r.drafts for r in recs)
    assert c.spec_draft_tokens == 3 * c.spec_drafts
    assert c.spec_accepted == sum(r.accepted for r in recs) == sum(c.spec_accepted_per_pos)
    assert c.generation_tokens == 1500
    rates = [n / c.spec_drafts for n in c.spec_accepted_per_pos]
    assert rates == sorted(rates, reverse=True)
    assert rates == pytest.approx([0.9, 0.6, 0.3], abs=0.07)


def test_eos_natural_length_and_min_tokens():
    eng, _ = _engine("eos_mean_tokens=10")
    lengths = [eng.admit([200], 1000, 0, False, "chat", True, str(i)).target_tokens for i in range(200)]
    assert sum(lengths) / len(lengths) == pytest.approx(10, rel=0.3)
    assert min(eng.admit([200], 1000, 50, False, "chat", True, str(i)).target_tokens for i in range(50)) >= 50
    assert all(eng.admit([200], 64, 0, True, "chat", True, str(i)).target_tokens == 64 for i in range(20))


def test_decode_steps_wait_for_or_share_other_prefills():
    eng, clock = _engine("decode_tps=100", "prefill_tps=1000")
    a = eng.admit([200] * 10, 50, 0, True, "chat", True, "a")
    eng.first_token(a, a.t_prefill_end, a.t_prefill_end)
    clock.t = a.t_prefill_end
    b = eng.admit(list(range(100, 1100)), 5, 0, True, "chat", True, "b")  # 1 s of prefill
    assert eng.next_target(a, clock.t) == pytest.approx(b.t_prefill_end)  # monolithic prefill: wait
    eng2, clock2 = _engine("decode_tps=100", "prefill_tps=1000", "prefill_chunk_tokens=100")
    a = eng2.admit([200] * 10, 50, 0, True, "chat", True, "a")
    eng2.first_token(a, a.t_prefill_end, a.t_prefill_end)
    clock2.t = a.t_prefill_end
    eng2.admit(list(range(100, 1100)), 5, 0, True, "chat", True, "b")
    # chunked: the step shares the forward with one 100-token chunk (0.1 s) on top of its own 0.01 s
    assert eng2.next_target(a, clock2.t) == pytest.approx(clock2.t + 0.01 + 0.1)
