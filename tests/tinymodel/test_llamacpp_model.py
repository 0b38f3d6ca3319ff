"""The tiny GGUF builder: deterministic bytes, cache behaviour, the constant-channel bias, recipe hook."""

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
from labkit.tinymodel import inputs, tokenizer, write
from labkit.tinymodel import spec as specs

gguf = pytest.importorskip(
    "gguf", reason="the 'llamacpp' extra is not installed (pip install -e '.[llamacpp]')"
)
pytest.importorskip(
    "tokenizers", reason="the 'llamacpp' extra is not installed (pip install -e '.[llamacpp]')"
)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ pure parts


def test_byte_alphabet_is_a_bijection():
    table = tokenizer.bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert table[ord("A")] == "A" and table[ord(" ")] == "\u0120"  # GPT-2's 'Ġ'
    assert tokenizer.piece_bytes("\u0120hello") == b" hello"


def test_suppression_rules():
    enc = tokenizer.bytes_to_unicode()

    def piece(raw: bytes) -> str:
        return "".join(enc[b] for b in raw)

    tokens = list(specs.SPECIALS) + [
        piece(b)
        for b in (b" the", b"\n", b"\t", b"caf\xc3\xa9", b"a<b", b"x" * 32, b"x" * 33, b"\x7f", b"</")
    ]
    got = dict(zip(tokens, tokenizer.suppressed(tokens), strict=True))
    assert got == {
        **{s: True for s in specs.SPECIALS},
        piece(b" the"): False,
        piece(b"\n"): False,
        piece(b"\t"): True,
        piece(b"caf\xc3\xa9"): True,
        piece(b"a<b"): True,
        piece(b"x" * 32): False,
        piece(b"x" * 33): True,
        piece(b"\x7f"): True,
        piece(b"</"): True,
    }
    assert tokenizer.suppressed([*specs.SPECIALS, piece(b"a<b")], allow_lt=True)[-1] is False


def test_bad_spec_and_unknown_preset_are_clear_errors(tmp_path):
    with pytest.raises(specs.ModelBuildError, match="must divide by heads"):
        write.build(specs.TinySpec(embedding=100, heads=3), tmp_path / "x.gguf", texts=["abc"])
    with pytest.raises(
        specs.ModelBuildError, match="no tiny model preset 'labkit/tiny-gpt'; known: tiny-llama"
    ):
        specs.preset("labkit/tiny-gpt")
    assert not list(tmp_path.iterdir())


def test_training_text_is_fixed_stdlib_files():
    files = inputs.corpus_files()
    assert [f.name for f in files] == ["argparse.py", "difflib.py", "topics.py", "textwrap.py"]
    texts = inputs.corpus()
    assert all(0 < len(t) <= inputs.CORPUS_CAP_CHARS for t in texts)
    with pytest.raises(specs.ModelBuildError, match="training text missing"):
        inputs.corpus_files(Path("/nonexistent-stdlib"))


# ------------------------------------------------------------------ building


@pytest.fixture(scope="module")
def small_build(tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("tiny")
    spec = specs.PRESETS["tiny-llama-small"]
    facts = write.build(spec, d / "a.gguf")
    return d / "a.gguf", facts


def test_build_is_byte_identical_twice_and_in_a_fresh_process(small_build, tmp_path):
    first, facts = small_build
    write.build(specs.PRESETS["tiny-llama-small"], tmp_path / "b.gguf")
    assert sha(first) == sha(tmp_path / "b.gguf") == facts["sha256"]
    # A fresh interpreter with another hash seed and thread count must agree too.
    code = (
        "import sys; from pathlib import Path; from labkit.tinymodel.spec import PRESETS; "
        "from labkit.tinymodel.write import build; "
        "print(build(PRESETS['tiny-llama-small'], Path(sys.argv[1]))['sha256'])"
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": "12345",
        "RAYON_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "c.gguf")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert out.stdout.strip() == facts["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.gguf", "c.gguf"]  # no temp files left


def test_seed_changes_the_weights_not_the_tokenizer(small_build, tmp_path):
    first, _ = small_build
    other = dataclasses.replace(specs.PRESETS["tiny-llama-small"], seed=1)
    write.build(other, tmp_path / "s1.gguf")
    a, b = gguf.GGUFReader(first), gguf.GGUFReader(tmp_path / "s1.gguf")
    assert sha(first) != sha(tmp_path / "s1.gguf")
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    assert (ta["token_embd.weight"].data != tb["token_embd.weight"].data).any()
    assert list(a.fields["tokenizer.ggml.merges"].data) == list(b.fields["tokenizer.ggml.merges"].data)


def field_value(reader, key):
    f = reader.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]]


def test_gguf_metadata_tensors_and_bias(small_build):
    path, facts = small_build
    r = gguf.GGUFReader(path)
    spec = specs.PRESETS["tiny-llama-small"]
    assert field_value(r, "general.architecture") == "llama"
    assert field_value(r, "tokenizer.ggml.model") == "gpt2"
    assert field_value(r, "tokenizer.ggml.pre") == "gpt-2"
    assert field_value(r, "llama.embedding_length") == 64
    assert field_value(r, "llama.block_count") == 2
    assert field_value(r, "tokenizer.ggml.eos_token_id") == 2
    assert field_value(r, "tokenizer.ggml.add_bos_token") is False
    tokens = field_value(r, "tokenizer.ggml.tokens")
    assert len(tokens) == spec.vocab and tokens[:3] == list(specs.SPECIALS)
    merges = field_value(r, "tokenizer.ggml.merges")
    assert len(merges) == facts["merges"] > 1000 and all(m.count(" ") == 1 for m in merges[:50])
    assert len(r.tensors) == 3 + 9 * spec.layers == facts["tensors"]
    t = {x.name: x.data for x in r.tensors}
    assert (t["token_embd.weight"][:, 0] == 1.0).all()  # the constant channel
    for n in range(spec.layers):
        assert (t[f"blk.{n}.attn_output.weight"][0] == 0).all() and (
            t[f"blk.{n}.ffn_down.weight"][0] == 0
        ).all()
    out = t["output.weight"]
    supp = tokenizer.suppressed(tokens)
    for i in (0, 1, 2) + tuple(i for i, s in enumerate(supp) if s)[:20]:
        assert out[i, 0] == specs.SUPPRESS_BIAS and (out[i, 1:] == 0).all()
    normal = [i for i, s in enumerate(supp) if not s]
    assert len(normal) > spec.vocab // 2 and (out[normal, 0] == 0).all() and (out[normal[0], 1:] != 0).any()


def test_ensure_builds_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path / "cache"))
    spec = dataclasses.replace(specs.PRESETS["tiny-llama-small"], seed=7)
    path = cache.ensure(spec, log=None)
    assert path.parent == tmp_path / "cache" / "models" and path.name.startswith("tiny-llama-small-")
    facts = cache.facts(path)
    assert facts["sha256"] == sha(path) and facts["spec"]["seed"] == 7
    mtime = path.stat().st_mtime_ns
    assert cache.ensure(spec, log=None) == path and path.stat().st_mtime_ns == mtime  # cache hit, no rebuild
    assert cache.ensure(dataclasses.replace(spec, seed=8), log=None) != path  # other params, other key
    assert sorted(p.suffix for p in path.parent.iterdir()) == [".gguf", ".gguf", ".json", ".json"]


def test_materialize_points_a_plan_at_the_built_model(tmp_path, monkeypatch):
    from labkit.recipe.lookup import load_plan

    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    plan = load_plan("tiny-llamacpp", size="small")
    assert plan.model.repo == "labkit/tiny-llama-small" and plan.model.path is None
    shown = cache.materialize(plan, build=False)  # what `labkit show` prints: the path, nothing built yet
    assert shown.model_path.startswith(str(tmp_path)) and not list(tmp_path.rglob("*.gguf"))
    ready = cache.materialize(plan, log=None)
    assert ready.model_path == shown.model_path
    assert ready.model_path == str(cache.ensure("tiny-llama-small", log=None))
    assert ready.model_path.startswith(str(tmp_path)) and Path(ready.model_path).is_file()
    sim = load_plan("sim")
    assert cache.materialize(sim, log=None) is sim  # labkit/sim-dsv41 is not a built model
    remote = dataclasses.replace(plan, cluster=dataclasses.replace(plan.cluster, nodes=("dgx5", "dgx6")))
    with pytest.raises(specs.ModelBuildError, match="built on this machine only"):
        cache.materialize(remote, log=None)


def test_cli_builds_once_and_names_bad_presets(tmp_path):
    env = {**os.environ, "LABKIT_CACHE": str(tmp_path)}
    run = [sys.executable, "-m", "labkit", "tiny-model"]
    first = subprocess.run([*run, "tiny-llama-small"], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and "building tiny model tiny-llama-small" in first.stderr
    path = Path(first.stdout.strip())
    assert path.is_file() and path.parent == tmp_path / "models"
    again = subprocess.run(
        [*run, "tiny-llama-small", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and "building" not in again.stderr
    assert json.loads(again.stdout)["sha256"] == sha(path)
    bad = subprocess.run([*run, "tiny-gpt"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "no tiny model preset 'tiny-gpt'" in bad.stderr
