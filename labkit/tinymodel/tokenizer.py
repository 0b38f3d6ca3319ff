"""The tiny model's byte-level BPE tokenizer (trained with `tokenizers`) and which of its tokens are suppressed.

A suppressed token is one that would break the "one token per SSE chunk" property: control tokens, non-ASCII
or control bytes, pieces over 32 bytes, pieces with `<` (unless allowed). The weights give each of them a
large negative logit bias (labkit.tinymodel.weights), so the model never generates one.
"""

from __future__ import annotations

import json
from typing import Any

from labkit.tinymodel.spec import MAX_PIECE_BYTES, SPECIALS, ModelBuildError


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


def train(texts: list[str], vocab: int) -> Any:
    """The trained byte-level BPE (a `tokenizers.Tokenizer`), checked: `vocab` contiguous ids, the specials
    first and marked special. `.to_str()` is the HF `tokenizer.json`; `tokens_and_merges` gives the GGUF side."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        show_progress=False,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    by_id = {i: t for t, i in tok.get_vocab().items()}
    if sorted(by_id) != list(range(vocab)):
        raise ModelBuildError(
            f"tokenizer training gave {len(by_id)} tokens, not {vocab} contiguous ids "
            "(training text too small?)"
        )
    if [by_id[i] for i in range(len(SPECIALS))] != list(SPECIALS):
        raise ModelBuildError(f"special tokens did not get ids 0-2: {[by_id[i] for i in range(3)]}")
    added = {a["content"]: a["special"] for a in json.loads(tok.to_str())["added_tokens"]}
    if added != {s: True for s in SPECIALS}:
        raise ModelBuildError(f"the specials are not exactly the special added tokens: {added}")
    return tok


def tokens_and_merges(tok: Any) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) of a trained tokenizer (some `tokenizers` versions
    serialise merges as pairs)."""
    by_id = {i: t for t, i in tok.get_vocab().items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    return tokens, merges


def train_tokenizer(texts: list[str], vocab: int) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as 'a b' strings) of a byte-level BPE trained on `texts` (the GGUF side)."""
    return tokens_and_merges(train(texts, vocab))


def suppressed(tokens: list[str], allow_lt: bool = False) -> list[bool]:
    """Which tokens must never be generated (see the module docstring)."""
    inverse = {c: b for b, c in bytes_to_unicode().items()}
    out = []
    for i, token in enumerate(tokens):
        if i < len(SPECIALS):
            out.append(True)
            continue
        raw = piece_bytes(token, inverse)
        bad = (
            len(raw) > MAX_PIECE_BYTES
            or any(b >= 0x80 or b == 0x7F or (b < 0x20 and b != 0x0A) for b in raw)
            or (not allow_lt and b"<" in raw)
        )
        out.append(bad)
    return out
