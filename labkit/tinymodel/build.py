"""A tiny random-weight llama GGUF that labkit builds itself, so a real engine (llama-cpp-python) runs offline.

Nothing is downloaded: the byte-level BPE tokenizer is trained on a fixed list of Python standard-library
source files of the running interpreter, the weights come from a seeded PCG64 stream. The weights carry a
"constant channel" (llamacpp.md §1.4): channel 0 of every embedding is 1 and no layer writes to it, so
column 0 of `output.weight` is a per-token logit bias. That bias removes every token that would break the
"one token per SSE chunk" property (control tokens, non-ASCII or control bytes, pieces over 32 bytes,
pieces with `<`) and, by default, EOS, so `max_tokens=N` streams exactly N content chunks.

Determinism: the file's bytes depend only on the spec, the training text, the `tokenizers` version (BPE
training) and the `gguf` writer version. Weights avoid numpy's distribution code (whose streams may change
between numpy versions): they are scaled 24-bit integers taken from PCG64's raw output, which numpy keeps
stable, and every step is exact IEEE arithmetic. The training text is identical on machines with the same
CPython release (unpatched stdlib files); the cache key hashes the text itself, so a machine with other
text builds (and caches) its own model instead of reusing a wrong one.

Built models live in the cache (`$LABKIT_CACHE/models`, default `~/.cache/labkit/models`) as
`<name>-<key>.gguf` plus a `.json` sidecar (spec, text hashes, versions, file sha256). Writes are atomic
(temp file + rename), so a crashed build leaves no half file and concurrent builders agree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError

BUILDER_VERSION = 1
REPO_PREFIX = "labkit/"  # recipes name a built model as model.repo = "labkit/<preset>"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2
BOS_ID, EOS_ID, PAD_ID = 0, 2, 0
SUPPRESS_BIAS = -40.0
MAX_PIECE_BYTES = 32  # llama-cpp-python detokenises one piece into a 32-byte buffer
# Training text: stdlib files of the running interpreter, sorted, each capped (about 420 KB in all).
CORPUS_FILES = ("argparse.py", "difflib.py", "pydoc_data/topics.py", "textwrap.py")
CORPUS_CAP_CHARS = 160_000
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ModelBuildError(LabkitError):
    """The tiny model could not be built: names the missing file, package or bad parameter."""


@dataclass(frozen=True)
class TinySpec:
    """Builder parameters; every field goes into the cache key."""

    name: str = "tiny-llama"
    vocab: int = 2048
    embedding: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    ff: int = 384
    context: int = 32768
    eos_bias: float = SUPPRESS_BIAS  # about +6 makes EOS likely (stops after ~5 tokens)
    seed: int = 0
    allow_lt: bool = False  # allow pieces containing '<' (they can be held back in chat streams)

    def check(self) -> None:
        if self.vocab < 300:
            raise ModelBuildError(f"tiny model {self.name}: vocab {self.vocab} < 300 (256 bytes + specials + merges)")
        if self.embedding % self.heads or self.heads % self.kv_heads:
            raise ModelBuildError(f"tiny model {self.name}: embedding {self.embedding} must divide by heads "
                                  f"{self.heads}, and heads by kv_heads {self.kv_heads}")
        if min(self.layers, self.ff, self.context, self.heads, self.kv_heads) < 1:
            raise ModelBuildError(f"tiny model {self.name}: layers, ff, context and heads must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads


PRESETS: dict[str, TinySpec] = {
    "tiny-llama": TinySpec(),
    "tiny-llama-small": TinySpec(name="tiny-llama-small", embedding=64, layers=2, ff=192),
    "tiny-llama-eos": TinySpec(name="tiny-llama-eos", eos_bias=6.0),
}


def preset(name: str) -> TinySpec:
    """A named spec; accepts 'tiny-llama' or the recipe form 'labkit/tiny-llama'."""
    key = name.removeprefix(REPO_PREFIX)
    if key not in PRESETS:
        raise ModelBuildError(f"no tiny model preset '{name}'; known: {', '.join(PRESETS)}")
    return PRESETS[key]


def cache_dir() -> Path:
    """Where built models go: $LABKIT_CACHE/models, else ~/.cache/labkit/models."""
    root = os.environ.get("LABKIT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "labkit") / "models"


# --------------------------------------------------------------------------------------------------
# Inputs: training text and versions (pure reads)


def corpus_files(stdlib: Path | None = None) -> list[Path]:
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    files = [root / rel for rel in sorted(CORPUS_FILES)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ModelBuildError(f"tiny model training text missing: {', '.join(missing)} "
                              f"(Python {sys.version.split()[0]} stdlib at {root})")
    return files


def corpus(stdlib: Path | None = None) -> list[str]:
    """The training text, one string per file, in a fixed order."""
    return [f.read_text(encoding="utf-8")[:CORPUS_CAP_CHARS] for f in corpus_files(stdlib)]


def _versions() -> dict[str, str]:
    try:
        from importlib.metadata import version

        import gguf  # noqa: F401
        import tokenizers
    except ImportError as e:
        raise ModelBuildError(f"building the tiny model needs the 'llamacpp' extra "
                              f"(pip install -e '.[llamacpp]'): {e}")
    return {"tokenizers": tokenizers.__version__, "gguf": version("gguf"), "builder": str(BUILDER_VERSION)}


def cache_key(spec: TinySpec, texts: list[str], versions: dict[str, str]) -> str:
    """Content hash of everything the bytes depend on."""
    blob = json.dumps({"spec": dataclasses.asdict(spec), "versions": versions,
                       "text": [hashlib.sha256(t.encode()).hexdigest() for t in texts]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# Tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100 onwards."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def piece_bytes(token: str, inverse: dict[str, int] | None = None) -> bytes:
    """The real bytes of a byte-level token string."""
    inverse = inverse or {c: b for b, c in bytes_to_unicode().items()}
    return bytes(inverse[c] for c in token)


def train_tokenizer(texts: list[str], vocab: int) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) of a byte-level BPE trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    by_id = {i: t for t, i in tok.get_vocab().items()}
    if sorted(by_id) != list(range(vocab)):
        raise ModelBuildError(f"tokenizer training gave {len(by_id)} tokens, not {vocab} contiguous ids "
                              "(training text too small?)")
    tokens = [by_id[i] for i in range(vocab)]
    if tokens[:3] != list(SPECIALS):
        raise ModelBuildError(f"special tokens did not get ids 0-2: {tokens[:3]}")
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    return tokens, merges


def suppressed(tokens: list[str], allow_lt: bool = False) -> list[bool]:
    """Which tokens must never be generated (see the module docstring)."""
    inverse = {c: b for b, c in bytes_to_unicode().items()}
    out = []
    for i, token in enumerate(tokens):
        if i < len(SPECIALS):
            out.append(True)
            continue
        raw = piece_bytes(token, inverse)
        bad = (len(raw) > MAX_PIECE_BYTES or any(b >= 0x80 or b == 0x7F or (b < 0x20 and b != 0x0A) for b in raw)
               or (not allow_lt and b"<" in raw))
        out.append(bad)
    return out


# --------------------------------------------------------------------------------------------------
# Weights


class _Stream:
    """Uniform weights from PCG64's raw 64-bit output: exact arithmetic, stable across numpy versions."""

    def __init__(self, seed: int):
        import numpy as np

        self.np = np
        self.bits = np.random.PCG64(seed)

    def uniform(self, shape: tuple[int, ...], std: float):
        np = self.np
        n = math.prod(shape)
        raw = self.bits.random_raw(n).astype(np.uint64)
        k = (raw >> np.uint64(40)).astype(np.float64)  # 24-bit integers, exact in float64
        u = (k + 0.5) / float(1 << 23) - 1.0  # symmetric in (-1, 1), exact
        return (u * (std * math.sqrt(3.0))).astype(np.float32).reshape(shape)  # uniform with this std


def weights(spec: TinySpec, bias) -> dict[str, Any]:
    """name -> float32 array ([out, in] as numpy sees it), in a fixed order."""
    np_ = _Stream(spec.seed)
    E, F, V = spec.embedding, spec.ff, spec.vocab
    kv = spec.kv_heads * spec.head_dim
    small = 0.1 / math.sqrt(E)
    out: dict[str, Any] = {}
    emb = np_.uniform((V, E), 1.0)
    emb[:, 0] = 1.0  # the constant channel
    out["token_embd.weight"] = emb
    ones = np_.np.ones(E, dtype=np_.np.float32)
    for n in range(spec.layers):
        out[f"blk.{n}.attn_norm.weight"] = ones.copy()
        out[f"blk.{n}.attn_q.weight"] = np_.uniform((E, E), 1 / math.sqrt(E))
        out[f"blk.{n}.attn_k.weight"] = np_.uniform((kv, E), 1 / math.sqrt(E))
        out[f"blk.{n}.attn_v.weight"] = np_.uniform((kv, E), 1 / math.sqrt(E))
        o = np_.uniform((E, E), small)
        o[0, :] = 0.0  # no layer writes channel 0
        out[f"blk.{n}.attn_output.weight"] = o
        out[f"blk.{n}.ffn_norm.weight"] = ones.copy()
        out[f"blk.{n}.ffn_gate.weight"] = np_.uniform((F, E), 1 / math.sqrt(E))
        out[f"blk.{n}.ffn_up.weight"] = np_.uniform((F, E), 1 / math.sqrt(E))
        d = np_.uniform((E, F), small)
        d[0, :] = 0.0
        out[f"blk.{n}.ffn_down.weight"] = d
    out["output_norm.weight"] = ones.copy()
    head = np_.uniform((V, E), 1.5 / math.sqrt(E))
    head[:, 0] = 0.0
    fixed = bias != 0.0
    head[fixed, :] = 0.0  # a suppressed token's logit is its bias times the (positive) channel 0
    head[:, 0] += bias
    out["output.weight"] = head
    return out


# --------------------------------------------------------------------------------------------------
# Writing


def build(spec: TinySpec, dest: Path, texts: list[str] | None = None) -> dict[str, Any]:
    """Write the GGUF to `dest` (atomically) and return its facts; no cache involved."""
    import gguf
    import numpy as np

    spec.check()
    texts = corpus() if texts is None else texts
    versions = _versions()
    tokens, merges = train_tokenizer(texts, spec.vocab)
    supp = suppressed(tokens, spec.allow_lt)
    bias = np.zeros(spec.vocab, dtype=np.float32)
    bias[np.array(supp)] = SUPPRESS_BIAS
    bias[EOS_ID] = spec.eos_bias
    tensors = weights(spec, bias)

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name(spec.name)
        w.add_file_type(0)  # all F32
        w.add_vocab_size(spec.vocab)
        w.add_context_length(spec.context)
        w.add_embedding_length(spec.embedding)
        w.add_block_count(spec.layers)
        w.add_feed_forward_length(spec.ff)
        w.add_head_count(spec.heads)
        w.add_head_count_kv(spec.kv_heads)
        w.add_rope_dimension_count(spec.head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types([3 if i < len(SPECIALS) else 1 for i in range(spec.vocab)])
        w.add_token_merges(merges)
        w.add_bos_token_id(BOS_ID)
        w.add_eos_token_id(EOS_ID)
        w.add_pad_token_id(PAD_ID)
        w.add_add_bos_token(False)
        w.add_chat_template(CHAT_TEMPLATE)
        for name, array in tensors.items():
            w.add_tensor(name, array)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {
        "spec": dataclasses.asdict(spec),
        "versions": versions,
        "text_files": list(CORPUS_FILES),
        "text_sha256": [hashlib.sha256(t.encode()).hexdigest() for t in texts],
        "python": sys.version.split()[0],
        "merges": len(merges),
        "suppressed": int(sum(supp)),
        "tensors": len(tensors),
        "bytes": dest.stat().st_size,
        "sha256": _sha256(dest),
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_path(spec: TinySpec, root: Path | None = None, texts: list[str] | None = None) -> Path:
    """Where this spec's model lives in the cache (built or not)."""
    texts = corpus() if texts is None else texts
    return (root or cache_dir()) / f"{spec.name}-{cache_key(spec, texts, _versions())}.gguf"


def ensure(spec: TinySpec | str, root: Path | None = None, log=sys.stderr) -> Path:
    """The cached model for `spec` (a TinySpec or preset name), built on first use."""
    spec = preset(spec) if isinstance(spec, str) else spec
    texts = corpus()
    path = model_path(spec, root, texts)
    if path.is_file():
        return path
    if log is not None:
        print(f"labkit: building tiny model {spec.name} -> {path}", file=log, flush=True)
    t0 = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))  # own folder: concurrent builds agree
    try:
        facts = build(spec, work / path.name, texts)
        facts["build_seconds"] = round(time.monotonic() - t0, 3)
        (work / "facts.json").write_text(json.dumps(facts, indent=2, sort_keys=True))
        # Sidecar first, then the model: a model file in the cache always has its facts beside it.
        os.replace(work / "facts.json", path.with_suffix(".json"))
        os.replace(work / path.name, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if log is not None:
        print(f"labkit: built {path.name} ({facts['bytes'] / 2**20:.1f} MiB, {facts['build_seconds']} s)",
              file=log, flush=True)
    return path


def facts(path: Path) -> dict[str, Any] | None:
    """The sidecar facts of a cached model, if present."""
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else None


def is_built_model(repo: str) -> bool:
    """True when a recipe's model.repo names a labkit-built tiny model ('labkit/tiny-llama')."""
    return repo.startswith(REPO_PREFIX) and repo.removeprefix(REPO_PREFIX) in PRESETS


def materialize(plan, root: Path | None = None, log=sys.stderr, build: bool = True):
    """The plan with model.path set to the built tiny model when model.repo names one; else unchanged.

    serve.py calls this before launching a lane, so the recipe needs no machine-specific path.
    `build=False` only computes where the model would be (for showing commands); without the
    'llamacpp' extra the plan is then returned unchanged.
    """
    if plan.model.path or not is_built_model(plan.model.repo):
        return plan
    if not plan.cluster.is_local:
        raise ModelBuildError(f"{plan.file}: model.repo {plan.model.repo} is built on this machine only; use "
                              "cluster.nodes = [\"localhost\"] or give model.path")
    if build:
        path = ensure(plan.model.repo, root, log)
    else:
        try:
            path = model_path(preset(plan.model.repo), root)
        except ModelBuildError:
            return plan
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, path=str(path)))
