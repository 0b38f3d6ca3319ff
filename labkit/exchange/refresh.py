"""`labkit import --refresh`: every stored import read again from the file it keeps, by this labkit's readers.

An import stores the tool's file byte for byte beside what labkit read from it (the figures, their definitions,
the run's summary). When a later labkit reads more of a format (the load levels of a rate-paced vllm-bench file,
say), re-importing the file finds its run and leaves it: a run folder is never overwritten. This is the
explicit way to bring those runs up to date: only the parts derived from the kept file change (the summary,
measure_info, the import's fingerprint and setting), atomically, each run recording when, by which labkit and
why under `refreshed` (labkit.store.refresh_run). Every stored import is read and checked before any is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labkit.exchange.formats import ReadOptions
from labkit.exchange.importing import RUN_PREFIX, SOURCE, original_name, read_file, result_digest, summary_of
from labkit.exchange.jsonfile import ImportFileError
from labkit.store import ResultsStore, read_run, refresh_run

WHY = "import refreshed: the kept file read again by this labkit's readers"


@dataclass(frozen=True)
class RefreshOutcome:
    """One stored import: refreshed (with the measures that changed) or unchanged."""

    path: Path
    action: Literal["refreshed", "unchanged"]
    changed: tuple[str, ...] = ()


def _reread(folder: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the refreshed parts, the measures whose figure or definition changed) of one stored import."""
    run = read_run(folder)
    prov = run.provenance.raw
    kept = folder / original_name(Path(str(prov.get("file", ""))))
    if not kept.is_file():
        raise ImportFileError(f"{folder}: the imported file it keeps ({kept.name}) is missing")
    options = ReadOptions(extra_keys=bool(prov.get("unread_keys")))
    found, _ = read_file(kept, str(prov.get("format") or "") or None, options)
    index = int(prov.get("result_index") or 0)
    imp = next((i for i in found if i.index == index), None)
    if imp is None:
        raise ImportFileError(f"{folder}: {kept.name} no longer holds result {index} for this labkit")
    summary, info = summary_of(imp, str(prov.get("file")))
    new, old = summary.to_dict(), run.raw.get("summary") or {}
    before, after = old.get("measures") or {}, new["measures"]
    changed = tuple(
        sorted(
            k
            for k in set(before) | set(after)
            if before.get(k) != after.get(k) or (run.raw.get("measure_info") or {}).get(k) != info.get(k)
        )
    )
    if new == old and (run.raw.get("measure_info") or {}) == info:
        return {}, ()
    imported = {"fingerprint": result_digest(imp), "setting": imp.setting.to_dict()}
    return {"summary": new, "measure_info": info, "imported": imported}, changed


def refresh_imports(results: str | Path | None = None) -> list[RefreshOutcome]:
    """Read every stored import again; rewrite those whose figures or definitions this labkit reads otherwise.
    ImportFileError (nothing written) when a kept file is missing or no longer reads."""
    store = ResultsStore(results)
    planned = []
    for folder in store.run_folders():
        if folder.name.startswith(RUN_PREFIX) and read_run(folder).source == SOURCE:
            planned.append((folder, *_reread(folder)))
    out = []
    for folder, changes, changed in planned:
        if changes:
            refresh_run(folder, changes, WHY)
        out.append(RefreshOutcome(folder, "refreshed" if changes else "unchanged", changed))
    return out
