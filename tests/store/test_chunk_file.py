"""The chunk file (run schema 2): chunk stamps leave requests.csv for chunks.csv.gz, every reader gets them back,
schema-1 folders read as before, and a broken chunk file is an error naming it."""

from __future__ import annotations

import csv
import gzip
import json
import shutil

import pytest

from labkit.exchange.run_export import request_rows
from labkit.measure import RequestRecord, RunSummary
from labkit.store import ResultsError, ResultsStore, files, load_results, read_run
from labkit.store.chunks import CHUNK_COLUMNS, chunks_apart
from labkit.store.load import read_records
from tests.support.results import REPO, sim_plan


def load_records(n: int = 5, chunks: int = 7) -> list[RequestRecord]:
    """Load requests with every kind of cell: chunk lists, a usage dict, None, floats, one failed request."""
    out = []
    for i in range(n):
        t_send = 1_000_000 * i
        stamps = [t_send + 50_000_000 + 1_234_567 * k for k in range(chunks)] if i != 3 else []
        out.append(
            RequestRecord(
                run_id="r",
                lane="sim",
                phase="load",
                concurrency=4,
                turn=i,
                stream=i % 4,
                output_tokens=2 * len(stamps) or None,
                chunks=len(stamps),
                t_send=t_send,
                t_first=stamps[0] if stamps else None,
                t_last=stamps[-1] if stamps else None,
                ttft_s=0.05 + i / 1000 if stamps else None,
                ok=i != 3,
                error="" if i != 3 else "ReadTimeout: boom",
                nonce=f"00{i}e1",
                response_id=f"chatcmpl-{i}",
                usage={"completion_tokens": 2 * len(stamps)},
                chunk_t=stamps,
                chunk_n=[2] * len(stamps) if i != 1 else [],  # request 1: counts unknown
                load_loop="closed",
                load_level=4.0,
            )
        )
    return out


def write_run(root, records):
    with ResultsStore(root).new_run(sim_plan()) as run:
        run.write_requests(records)
        run.finish(RunSummary(n_ok=len(records)))
    return run.path


def test_a_new_run_keeps_chunks_in_their_own_file_and_reads_back_equal(tmp_path):
    records = load_records()
    path = write_run(tmp_path, records)
    with open(path / files.REQUESTS_FILE, newline="") as f:
        header = next(csv.reader(f))
    assert not set(CHUNK_COLUMNS) & set(header) and "response_id" in header
    with gzip.open(path / files.CHUNKS_FILE, "rt") as f:
        rows = list(csv.DictReader(f))
    assert [r["response_id"] for r in rows] == [r.response_id for r in records]
    assert json.loads(rows[0]["chunk_t"]) == records[0].chunk_t
    run = read_run(path)
    assert run.schema_version == files.RUN_SCHEMA_VERSION and chunks_apart(run.schema_version)
    assert files.CHUNKS_FILE in run.files
    assert read_records(run) == records
    frame = load_results(tmp_path).requests()
    assert [json.loads(c) for c in frame["chunk_t"]] == [r.chunk_t for r in records]
    assert [json.loads(c) for c in frame["chunk_n"]] == [r.chunk_n for r in records]
    # the columns sit where requests.csv held them up to schema 1
    assert list(frame.columns)[3:] == [c for c in RequestRecord.columns() if c != "run_id"]
    assert "chunk_t" not in load_results(tmp_path).requests(chunks=False).columns
    assert [r["chunk_t"] for r in request_rows(path)] == [r.chunk_t for r in records]


def test_the_same_records_give_the_same_chunk_file(tmp_path):
    a, b = write_run(tmp_path / "a", load_records()), write_run(tmp_path / "b", load_records())
    assert (a / files.CHUNKS_FILE).read_bytes() == (b / files.CHUNKS_FILE).read_bytes()


def test_a_partial_rewrite_leaves_no_temp_file_and_the_last_rows(tmp_path):
    records = load_records()
    with ResultsStore(tmp_path).new_run(sim_plan()) as run:
        run.write_requests(records[:2])  # on_partial: what was measured so far
        run.write_requests(records)
        run.finish(RunSummary())
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]
    assert read_records(read_run(run.path)) == records


def test_a_chunk_file_newer_than_requests_csv_still_reads(tmp_path):
    """A crash between the two writes: the chunk file (written first) has rows requests.csv does not."""
    records = load_records()
    path = write_run(tmp_path, records)
    fuller = write_run(tmp_path / "fuller", records + load_records(7)[5:])
    shutil.copy(fuller / files.CHUNKS_FILE, path / files.CHUNKS_FILE)
    assert read_records(read_run(path)) == records


def test_an_old_schema_run_reads_as_before(tmp_path):
    src = REPO / "results" / "sim" / "spec-none" / "20261201T145153Z-4a27f6"
    old = tmp_path / "sim" / "spec-none" / src.name
    shutil.copytree(src, old)
    run = read_run(old)
    assert run.schema_version == 1 and not (old / files.CHUNKS_FILE).exists()
    frame = load_results(tmp_path).requests()
    assert len(frame) == 17 and frame["chunk_t"].str.startswith("[").all()
    records = read_records(run)
    assert [json.dumps(r.chunk_t, separators=(",", ":")) for r in records] == list(frame["chunk_t"])
    assert any(len(r.chunk_t) > 1 for r in records)
    # reading never writes: the committed folder's files are byte for byte what they were
    assert {p.name: p.read_bytes() for p in old.iterdir()} == {p.name: p.read_bytes() for p in src.iterdir()}


def corrupt(path, data: bytes) -> None:
    (path / files.CHUNKS_FILE).write_bytes(data)


def chunk_text(path) -> str:
    return gzip.decompress((path / files.CHUNKS_FILE).read_bytes()).decode()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: corrupt(p, b"not gzip at all"), "not a readable gzip'd CSV"),
        (lambda p: corrupt(p, (p / files.CHUNKS_FILE).read_bytes()[:40]), "not a readable gzip'd CSV"),
        (lambda p: (p / files.CHUNKS_FILE).unlink(), "missing"),
        (lambda p: corrupt(p, gzip.compress(b"a,b\n")), "header"),
        (lambda p: corrupt(p, gzip.compress("\n".join(chunk_text(p).splitlines()[:3]).encode())), "2 rows"),
        (
            lambda p: corrupt(p, gzip.compress(chunk_text(p).replace("chatcmpl-2", "chatcmpl-9").encode())),
            "response id 'chatcmpl-2'",
        ),
        (lambda p: corrupt(p, gzip.compress(chunk_text(p).replace("[2,2", "[2,x", 1).encode())), "JSON"),
        (
            lambda p: corrupt(p, gzip.compress(chunk_text(p).replace('"[2,2', '"[2.5,2', 1).encode())),
            "whole numbers",
        ),
        (
            lambda p: corrupt(p, gzip.compress(chunk_text(p).replace('"[2,2', '"[2', 1).encode())),
            "chunk_n for",
        ),
    ],
)
def test_a_broken_chunk_file_is_an_error_naming_it(tmp_path, damage, message):
    path = write_run(tmp_path, load_records())
    damage(path)
    for read in (lambda: read_records(read_run(path)), lambda: load_results(tmp_path).requests()):
        with pytest.raises(ResultsError, match=message) as err:
            read()
        assert str(path / files.CHUNKS_FILE) in str(err.value)
    assert len(load_results(tmp_path).requests(chunks=False)) == 5  # the other columns stay readable
