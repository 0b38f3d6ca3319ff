"""The pinned prompt corpus (docs/measurement.md, "Prompt content"): every category of the catalogue has tens
of prompts with their origin and licence stated, draws are seeded, bad files are named by line, and an
installed labkit carries the files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from labkit.measure.prompt.corpus import (
    CorpusError,
    content_prompt,
    load_corpus,
    parse,
    read_corpus,
)
from labkit.measures import CONTENT, header_content

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "labkit" / "measure" / "prompt" / "corpus"


def test_every_category_has_tens_of_prompts_with_origin_and_licence():
    corpus = load_corpus()
    assert tuple(corpus.prompts) == CONTENT
    readme = (FOLDER / "README.md").read_text()
    for category, prompts in corpus.prompts.items():
        assert len(prompts) >= 20, category
        assert len({p.id for p in prompts}) == len(prompts)
        assert all(p.category == category and len(p.text) > 80 for p in prompts)
        header = (FOLDER / f"{category}.txt").read_text().split("\n===", 1)[0]
        assert "Origin:" in header and "Licence:" in header, category
        assert f"`{category}.txt`" in readme
    assert "**Origin.**" in readme and "**Licence.**" in readme
    code = " ".join(p.text for p in corpus.prompts["code"])
    assert code.count("```") >= 20  # code to be changed, not only requests for code
    assert sum("tool" in p.text or "JSON" in p.text for p in corpus.prompts["structured"]) >= 15


def test_draws_are_seeded_distinct_then_cycle():
    corpus = load_corpus()
    a = corpus.draw("code", "1:0:content.code", 5)
    assert a == corpus.draw("code", "1:0:content.code", 5)
    assert a != corpus.draw("code", "1:1:content.code", 5)
    n = len(corpus.prompts["prose"])
    ring = corpus.draw("prose", "x", n + 3)
    assert len({p.id for p in ring[:n]}) == n and ring[n:] == ring[:3]


def test_the_header_names_the_category_after_the_nonce():
    p = load_corpus().prompts["structured"][0]
    text = content_prompt("0123456789ab", p)
    assert text.startswith("[0123456789ab structured] ") and text.endswith(p.text)
    assert header_content(text) == "structured"
    assert header_content("[0123456789ab] Write a long, detailed story") is None
    assert header_content("[0123456789ab poetry] x") is None


def test_the_digest_pins_the_files(tmp_path):
    for f in FOLDER.glob("*.txt"):
        shutil.copy(f, tmp_path / f.name)
    assert read_corpus(tmp_path).digest == load_corpus().digest
    chat = tmp_path / "chat.txt"
    chat.write_text(chat.read_text() + "=== chat-99\nOne more question, please.\n")
    changed = read_corpus(tmp_path)
    assert changed.digest != load_corpus().digest and changed.prompts["chat"][-1].id == "chat-99"


@pytest.mark.parametrize(
    "text, where",
    [
        ("# header\nstray text\n=== code-01\nx\n", "f.txt:2: text before the first"),
        ("=== prose-01\nx\n", "f.txt:1: prompt id 'prose-01' must start with 'code-'"),
        ("=== code-01\nx\n=== code-01\ny\n", "f.txt:3: prompt id 'code-01' appears twice"),
        ("=== code-01\n\n\n=== code-02\ny\n", "f.txt:1: prompt 'code-01' is empty"),
        ("# only a header\n", "f.txt: no prompts"),
    ],
)
def test_a_malformed_file_is_named_with_its_line(text, where):
    with pytest.raises(CorpusError) as e:
        parse(text, "code", "f.txt")
    assert where in str(e.value)


def test_a_missing_category_file_is_named(tmp_path):
    for f in FOLDER.glob("*.txt"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "chat.txt").unlink()
    with pytest.raises(CorpusError, match=r"chat\.txt: cannot read the 'chat' prompts"):
        read_corpus(tmp_path)


def test_an_installed_labkit_carries_the_corpus(tmp_path):
    """A wheel built from the checkout (package data in pyproject.toml) holds every corpus file."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "labkit", src / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheel"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src)]
    proc = subprocess.run([*cmd, "-w", str(out)], cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("labkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"labkit/measure/prompt/corpus/{f.name}" for f in FOLDER.iterdir()}
    assert shipped <= names and "labkit/measure/prompt/corpus/code.txt" in names
