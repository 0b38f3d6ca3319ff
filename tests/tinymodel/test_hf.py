"""The tiny model as an HF directory: files and the safetensors layout, deterministic bytes, BF16 rounding, the
tokenizer and weights as transformers reads them, the constant channel in BF16, the cache and the plan hook."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.tinymodel import build as cache
from labkit.tinymodel import hf, inputs, safetensors_file, tokenizer, weights
from labkit.tinymodel import spec as specs

np = pytest.importorskip("numpy", reason="building the HF tiny model needs numpy and tokenizers")
pytest.importorskip("tokenizers", reason="building the HF tiny model needs numpy and tokenizers")

SMALL = specs.PRESETS["tiny-llama-small"]
FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]
TEXTS = [
    "def main(argv=None):\n    parser = argparse.ArgumentParser(prog='x')\n",
    "The quick brown fox <|im_start|>jumps<|im_end|> over 12 lazy dogs.",
    "  café \t tabs\nand newlines\n\n",
]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """The small preset built once as an HF directory into a temp cache root."""
    return cache.ensure(SMALL, root=tmp_path_factory.mktemp("hf-cache"), log=None, fmt="hf")


@pytest.fixture(scope="module")
def trained():
    """The GGUF side's tokenizer training, as `tokenizers` gives it."""
    return tokenizer.train(inputs.corpus(), SMALL.vocab)


def expected_tensors(spec: specs.TinySpec = SMALL) -> dict:
    tokens, _ = tokenizer.train_tokenizer(inputs.corpus(), spec.vocab)
    return weights.weights(spec, weights.logit_bias(spec, tokenizer.suppressed(tokens, spec.allow_lt)))


# ------------------------------------------------------------------ the files


def test_files_exist_and_parse(small):
    assert small.is_dir() and small.name.startswith("tiny-llama-small-") and small.name.endswith("-hf")
    assert sorted(p.name for p in small.iterdir()) == FILES
    assert sorted(p.name for p in small.parent.iterdir()) == [
        small.name,
        small.name + ".json",
    ]  # no temp left
    cfg = json.loads((small / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["head_dim"]) == (64, 2, 16)
    assert cfg["max_position_embeddings"] == SMALL.context and cfg["tie_word_embeddings"] is False
    assert cfg["torch_dtype"] == cfg["dtype"] == "bfloat16" and cfg["rope_theta"] == 10000.0
    tc = json.loads((small / "tokenizer_config.json").read_text())
    assert (tc["bos_token"], tc["eos_token"], tc["pad_token"]) == (
        "<|endoftext|>",
        "<|im_end|>",
        "<|endoftext|>",
    )
    assert tc["add_bos_token"] is False and tc["chat_template"] == specs.CHAT_TEMPLATE
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["model_max_length"] == SMALL.context
    gen = json.loads((small / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0}  # no sampling defaults
    tok = json.loads((small / "tokenizer.json").read_text())
    assert [(a["id"], a["content"], a["special"]) for a in tok["added_tokens"]] == [
        (i, s, True) for i, s in enumerate(specs.SPECIALS)
    ]
    facts = cache.facts(small)
    assert facts["format"] == "hf" and facts["versions"]["format"] == "hf" and "gguf" not in facts["versions"]
    assert {n: f["sha256"] for n, f in facts["files"].items()} == {n: sha(small / n) for n in FILES}
    assert facts["bytes"] == sum((small / n).stat().st_size for n in FILES)
    assert facts["tensors"] == 3 + 9 * SMALL.layers


def test_safetensors_header_offsets_are_contiguous_and_cover_the_file(small):
    path = small / "model.safetensors"
    head, start = safetensors_file.read_header(path)
    assert start % 8 == 0 and head.pop("__metadata__") == {"format": "pt"}
    names = [hf.hf_name(n) for n in expected_tensors()]
    assert sorted(head) == sorted(names) and len(head) == 3 + 9 * SMALL.layers
    end = 0
    for name in sorted(head):  # written in sorted name order, back to back
        entry = head[name]
        assert entry["dtype"] == "BF16" and entry["data_offsets"][0] == end
        end = entry["data_offsets"][1]
        assert end - entry["data_offsets"][0] == 2 * int(np.prod(entry["shape"]))
    assert start + end == path.stat().st_size
    assert head["model.layers.1.mlp.down_proj.weight"]["shape"] == [64, 192]


def test_bytes_are_deterministic(small, tmp_path):
    again = tmp_path / "again"
    facts = hf.build_hf(SMALL, again)
    assert {n: sha(again / n) for n in FILES} == {n: sha(small / n) for n in FILES}
    assert facts["sha256"] == cache.facts(small)["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # no temp folder left
    with pytest.raises(specs.ModelBuildError, match="not empty"):
        hf.build_hf(SMALL, again)


# ------------------------------------------------------------------ BF16


def test_bf16_rounding_on_hand_values():
    cases = [  # (float32 value, its BF16 bits); a list, as 0.0 == -0.0 would merge as dict keys
        (1.0, 0x3F80),
        (1.00390625, 0x3F80),  # 1 + 2^-8: halfway between 0x3F80 and 0x3F81, ties to the even 0x3F80
        (1.01171875, 0x3F82),  # 1 + 3 * 2^-8: halfway between 0x3F81 and 0x3F82, ties to the even 0x3F82
        (float(np.nextafter(np.float32(1.00390625), np.float32(2))), 0x3F81),  # just above the tie: up
        (float(np.nextafter(np.float32(1.00390625), np.float32(0))), 0x3F80),  # just below: down
        (-1.01171875, 0xBF82),
        (-40.0, 0xC220),  # the suppression bias is exact
        (6.0, 0x40C0),  # the EOS-likely bias is exact
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (float("inf"), 0x7F80),
        (float(np.finfo(np.float32).max), 0x7F80),  # beyond BF16's largest finite value: rounds to inf
        (1e-45, 0x0000),  # the smallest float32 subnormal rounds to zero
    ]
    got = safetensors_file.bf16_bits(np.array([v for v, _ in cases], dtype=np.float32))
    assert [hex(int(g)) for g in got] == [hex(b) for _, b in cases]
    nan = safetensors_file.bf16_bits(np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan(safetensors_file.bf16_to_float32(nan)).all()
    assert safetensors_file.bf16_to_float32(np.array([0x3F82], dtype=np.uint16))[0] == 1.015625


def test_bf16_rounding_agrees_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_000).astype(np.float32)
    ties = (rng.integers(0, 1 << 16, 10_000, dtype=np.uint32) << 16) | 0x8000  # exactly halfway
    x = np.concatenate([x, ties.view(np.float32)[np.isfinite(ties.view(np.float32))]])
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(safetensors_file.bf16_bits(x), ref)


# ------------------------------------------------------------------ as transformers reads it


def test_tokenizer_encodes_as_the_gguf_training_and_renders_the_template(small, trained):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(small)
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        assert ids == trained.encode(text).ids and tok.decode(ids) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 2, 0)
    assert tok("<|im_start|>user\nhi<|im_end|>")["input_ids"][0] == 1
    messages = [{"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok(text)["input_ids"] == trained.encode(text).ids


def test_config_reads_the_shapes(small):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(small)
    assert cfg.model_type == "llama" and cfg.architectures == ["LlamaForCausalLM"]
    shape = (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    assert shape == (SMALL.vocab, SMALL.embedding, SMALL.ff, SMALL.layers)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (4, 4, 16)
    assert cfg.max_position_embeddings == SMALL.context and cfg.tie_word_embeddings is False
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (0, 2, 0)


def test_weights_are_the_float32_ones_rounded_to_bf16(small):
    pytest.importorskip("torch")
    from safetensors.torch import load_file

    got = {k: v.float().numpy() for k, v in load_file(small / "model.safetensors").items()}
    want = hf.hf_tensors(SMALL, expected_tensors())
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].shape == w.shape
        assert np.array_equal(got[name], safetensors_file.bf16_to_float32(safetensors_file.bf16_bits(w)))
        assert (np.abs(got[name] - w) <= np.abs(w) * 2.0**-8).all(), name  # within half a BF16 step
    emb, head = got["model.embed_tokens.weight"], got["lm_head.weight"]
    assert (emb[:, 0] == 1.0).all() and (got["model.layers.0.self_attn.o_proj.weight"][0] == 0).all()
    assert set(np.unique(head[:, 0])) <= {0.0, specs.SUPPRESS_BIAS}  # the bias column survives exactly


def test_q_and_k_rows_undo_llama_cpps_rope_permutation():
    def llama_cpp_permute(w, heads):  # convert_hf_to_gguf.py, LlamaModel.permute: HF -> GGUF
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)
    assert np.array_equal(hf.rope_rows(llama_cpp_permute(w, 4), 4), w)
    t = expected_tensors()
    mapped = hf.hf_tensors(SMALL, t)
    assert np.array_equal(
        mapped["model.layers.1.self_attn.q_proj.weight"], hf.rope_rows(t["blk.1.attn_q.weight"], 4)
    )
    assert np.array_equal(mapped["model.layers.1.self_attn.v_proj.weight"], t["blk.1.attn_v.weight"])
    with pytest.raises(specs.ModelBuildError, match="no HF name"):
        hf.hf_name("blk.0.attn_qkv.weight")


def test_a_forward_pass_never_picks_a_suppressed_token(small, trained):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.LlamaForCausalLM.from_pretrained(small, dtype=torch.bfloat16).eval()
    tokens, _ = tokenizer.tokens_and_merges(trained)
    supp = torch.tensor(tokenizer.suppressed(tokens))
    ids = [i for text in TEXTS for i in trained.encode(text).ids]
    ids += torch.randint(0, SMALL.vocab, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
        greedy = model.generate(torch.tensor([ids[:8]]), max_new_tokens=24, do_sample=False)[0, 8:]
    assert not supp[logits.argmax(-1)].any() and not supp[greedy].any() and len(greedy) == 24
    # Far below the rest: at every position each suppressed logit is ~ -40, every other one is > -15.
    assert logits[:, supp].max() < -30 and logits[:, ~supp].min() > -15


def test_same_function_as_the_gguf_on_llama_cpp(tmp_path):
    """The mapped float32 weights in transformers give llama.cpp's logits for the GGUF (the RoPE row order)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    llama_cpp = pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from labkit.tinymodel import write

    write.build(SMALL, tmp_path / "s.gguf")
    fields = {k: v for k, v in hf.config(SMALL).items() if k != "model_type" and "dtype" not in k}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**fields)).eval()  # float32
    state = {
        k: torch.from_numpy(np.ascontiguousarray(v))
        for k, v in hf.hf_tensors(SMALL, expected_tensors()).items()
    }
    model.load_state_dict(state, strict=True)
    ids = [5, 300, 400, 77, 1000, 1500, 42, 900, 1200, 64, 7, 8]
    llm = llama_cpp.Llama(str(tmp_path / "s.gguf"), n_ctx=64, logits_all=True, verbose=False, n_threads=1)
    try:
        llm.eval(ids)
        ref = np.array(llm.scores[: len(ids)])
    finally:
        llm.close()
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(got - ref).max() < 1e-3


# ------------------------------------------------------------------ cache and plans


def test_ensure_hf_builds_once_and_yields_to_a_concurrent_builder(tmp_path, monkeypatch):
    spec = dataclasses.replace(SMALL, seed=3)
    real = hf.build_hf
    final = cache.model_path(spec, tmp_path, fmt="hf")

    def racing(spec, dest, texts):  # another builder finishes first, while ours is still building
        real(spec, final, texts)
        return real(spec, dest, texts)

    monkeypatch.setattr(cache, "build_hf", racing)
    assert cache.ensure(spec, root=tmp_path, log=None, fmt="hf") == final
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name, final.name + ".json"]
    mtime = final.stat().st_mtime_ns
    monkeypatch.setattr(cache, "build_hf", None)  # a cache hit builds nothing
    assert (
        cache.ensure(spec, root=tmp_path, log=None, fmt="hf") == final and final.stat().st_mtime_ns == mtime
    )
    assert cache.model_path(spec, tmp_path, fmt="gguf").name != final.name.removesuffix("-hf") + ".gguf"
    with pytest.raises(specs.ModelBuildError, match="no tiny model format 'onnx'"):
        cache.ensure(spec, root=tmp_path, log=None, fmt="onnx")


def test_materialize_picks_hf_for_vllm_and_sglang_and_gguf_for_llamacpp(tmp_path):
    from labkit.recipe.lookup import load_plan

    plan = load_plan("tiny-llamacpp", size="small")
    vllm = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, kind="vllm"))
    sglang = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, kind="sglang"))
    assert [cache.model_format(p) for p in (plan, vllm, sglang)] == ["gguf", "hf", "hf"]
    shown = cache.materialize(vllm, root=tmp_path, build=False)
    assert shown.model_path.endswith("-hf") and not list(tmp_path.iterdir())
    ready = cache.materialize(vllm, root=tmp_path, log=None)
    assert ready.model_path == shown.model_path and Path(ready.model_path).is_dir()
    assert (Path(ready.model_path) / "model.safetensors").is_file()
    assert cache.materialize(plan, root=tmp_path, build=False).model_path.endswith(".gguf")


def test_hf_builds_without_gguf_and_the_cli_takes_a_format(small, tmp_path):
    code = (
        "import sys; sys.modules['gguf'] = None\n"  # import gguf now fails: the HF path must not need it
        "from labkit.cli.app import main\n"
        "sys.exit(main(['tiny-model', 'tiny-llama-small', '--format', sys.argv[1], '--json', '-q']))"
    )
    env = {**os.environ, "LABKIT_CACHE": str(tmp_path)}
    run = [sys.executable, "-c", code]
    out = subprocess.run([*run, "hf"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert Path(facts["path"]).is_dir() and Path(facts["path"]).parent == tmp_path / "models"
    assert facts["format"] == "hf" and sorted(facts["files"]) == FILES
    assert facts["sha256"] == cache.facts(small)["sha256"]  # a fresh process builds the same bytes
    gguf = subprocess.run([*run, "gguf"], env=env, capture_output=True, text=True, timeout=300)
    assert gguf.returncode == 1 and "needs the 'llamacpp' extra" in gguf.stderr
