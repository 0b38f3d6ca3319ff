"""What the chunk file (run schema 2) saves: bytes per request and per chunk on disk and in memory, the peak
memory of reading a run back and the read time, the old way (chunk lists inside requests.csv, schema 1) and the
new (chunks.csv.gz beside it), measured in the same run.

Writes one synthetic load run of N requests x C chunks each way through the real store (the old one with the
schema-1 writer, requests.csv holding every column), then reads each back through the readers the report and
notebooks use: `load_results(...).requests()` (a DataFrame, chunk lists as JSON text), the same without the
chunks (what the TTFT plot asks for) and `store.load.read_records` (RequestRecords, the lists parsed). Peak
memory is tracemalloc's over one read (after one untimed read of each kind); times are the median of --repeat reads without tracemalloc. Prints
figures; asserts nothing.

    python benchmarks/store_size.py [--requests 2000] [--chunks 128] [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from labkit.measure import RequestRecord, RunSummary  # noqa: E402
from labkit.store import ResultsStore, atomic_write_text, load_results, read_run  # noqa: E402
from labkit.store.files import REQUESTS_FILE, RUN_FILE  # noqa: E402
from labkit.store.load import read_records  # noqa: E402
from labkit.store.records import requests_csv  # noqa: E402

PLAN = {"recipe": "synthetic", "variant_id": "spec-none", "label": "synthetic load", "simulated": True}


def synth(n: int, chunks: int) -> list[RequestRecord]:
    """Closed-loop load requests at 8 streams: ~20 ms between chunks with jitter, now and then 2 tokens."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        t_send = i * 150_000_000 + rng.randrange(1_000_000)
        t, stamps, counts = t_send + rng.randrange(40_000_000, 90_000_000), [], []
        for _ in range(chunks):
            stamps.append(t)
            counts.append(2 if rng.random() < 0.05 else 1)
            t += rng.randrange(15_000_000, 25_000_000)
        out.append(
            RequestRecord(
                run_id="bench",
                lane="sim",
                phase="load",
                concurrency=8,
                turn=i,
                stream=i % 8,
                requested_tokens=sum(counts),
                prompt_tokens=512,
                output_tokens=sum(counts),
                output_tokens_source="continuous_usage",
                n_first=counts[0],
                chunks=chunks,
                t_send=t_send,
                t_first=stamps[0],
                t_last=stamps[-1],
                t_end=stamps[-1] + 300_000,
                ttft_s=(stamps[0] - t_send) / 1e9,
                decode_tps=(sum(counts) - counts[0]) / ((stamps[-1] - stamps[0]) / 1e9),
                finish_reason="length",
                http_status=200,
                nonce=f"{rng.getrandbits(64):016x}",
                response_id=f"chatcmpl-{rng.getrandbits(96):024x}",
                chunk_t=stamps,
                chunk_n=counts,
                load_loop="closed",
                load_level=8.0,
            )
        )
    return out


def write_new(root: Path, records: list[RequestRecord]) -> Path:
    with ResultsStore(root).new_run(PLAN) as run:
        run.write_requests(records)
        run.finish(RunSummary(n_ok=len(records)))
    return run.path


def write_old(root: Path, records: list[RequestRecord]) -> Path:
    """A schema-1 run folder as labkit wrote it before the chunk file: every column in requests.csv."""
    with ResultsStore(root).new_run(PLAN, n_requests=len(records)) as run:
        atomic_write_text(run.path / REQUESTS_FILE, requests_csv(records)[0])
        run.finish(RunSummary(n_ok=len(records)))
    doc = json.loads((run.path / RUN_FILE).read_text())
    doc["schema_version"] = 1
    atomic_write_text(run.path / RUN_FILE, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return run.path


def peak(read: Callable[[], Any]) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        value = read()
        return tracemalloc.get_traced_memory()[1], value
    finally:
        tracemalloc.stop()


def median_time(read: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        read()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="200 requests x 32 chunks, 3 reads (smoke run)")
    args = ap.parse_args()
    n, c, repeat = (200, 32, 3) if args.quick else (args.requests, args.chunks, args.repeat)
    tmp = Path(tempfile.mkdtemp(prefix="labkit-store-size-"))
    try:
        records = synth(n, c)
        chunks = n * c
        folders = {"old": write_old(tmp / "old", records), "new": write_new(tmp / "new", records)}
        print(f"{n} load requests x {c} chunks = {chunks} chunks; median of {repeat} reads")
        print("\non disk                    bytes   per request   per chunk")
        for way, folder in folders.items():
            for f in sorted(p for p in folder.iterdir() if p.name != RUN_FILE):
                size = f.stat().st_size
                print(f"  {way} {f.name:18} {size:>11,} {size / n:>11,.0f} {size / chunks:>11.1f}")
            total = sum(p.stat().st_size for p in folder.iterdir() if p.name != RUN_FILE)
            print(f"  {way} {'total':18} {total:>11,} {total / n:>11,.0f} {total / chunks:>11.1f}")
        readers: dict[str, Callable[[Path], Callable[[], Any]]] = {
            "requests() frame": lambda f: lambda: load_results(f.parent.parent.parent).requests(),
            "requests(chunks=False)": lambda f: (
                lambda: load_results(f.parent.parent.parent).requests(chunks=False)
            ),
            "read_records": lambda f: lambda: read_records(read_run(f)),
        }
        print("\nreading back              way  peak MiB  in memory B/req  B/chunk   time s  new/old")
        for make in readers.values():  # imports and first-call caches stay out of the first figure
            make(folders["old"])()
        for name, make in readers.items():
            old_time = 0.0
            for way, folder in folders.items():
                top, value = peak(make(folder))
                if isinstance(value, list):
                    kept = "               "  # a record list's size is not one number pandas gives
                    held = f"{'':>8}"
                else:
                    size = int(value.memory_usage(deep=True).sum())
                    kept, held = f"{size / n:>15,.0f}", f"{size / chunks:>8.1f}"
                t = median_time(make(folder), repeat)
                ratio = f"{t / old_time:7.2f}" if way == "new" else "       "
                old_time = t if way == "old" else old_time
                print(f"  {name:23} {way:4} {top / 2**20:8.1f} {kept} {held} {t:8.3f} {ratio}")
        same = read_records(read_run(folders["new"])) == records == read_records(read_run(folders["old"]))
        print(f"\nboth ways read back equal to the records written: {same}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
