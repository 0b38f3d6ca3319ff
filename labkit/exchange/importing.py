"""`labkit import`: another tool's result file stored as runs, one per result it holds, each with the tool,
its version, the file's hash and the file itself, every figure under its own name with its definition.

Everything is read and checked before anything is written, so a refused file stores nothing. A run id is the
hash of its result's content, so importing a result again finds its run and leaves it; one stored elsewhere
(another lane, or by an earlier labkit under an older id) is refused, naming it, never stored twice or
overwritten. docs/imports.md, "What is stored".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from labkit.errors import LabkitError
from labkit.exchange.definitions import definition
from labkit.exchange.formats import ReadOptions, detect
from labkit.exchange.jsonfile import ImportFileError, load
from labkit.exchange.model import UNKNOWN, Imported
from labkit.exchange.registry import FORMATS
from labkit.measure import RunSummary
from labkit.store import IMPORT_SOURCE, ResultsStore, read_run

SOURCE: Final = IMPORT_SOURCE
DEFAULT_OPTIONS = ReadOptions()
RUN_PREFIX = "import-"
ORIGINAL_PREFIX = "original-"
# what a measured run records and an imported file does not carry: "unknown", never guessed
NOT_CARRIED = ("engine_version", "engine_image", "engine_args", "nodes", "boot", "cold_or_warm")


@dataclass(frozen=True)
class ImportOutcome:
    run_id: str
    path: Path
    action: Literal["created", "unchanged", "duplicate"]  # duplicate: the file holds the same result twice
    imported: Imported


@dataclass(frozen=True)
class Prepared:
    """One result ready to store: where, under which plan, and what."""

    imported: Imported
    plan: dict[str, Any]
    run_id: str
    summary: RunSummary
    measure_info: dict[str, dict[str, Any]]
    fingerprint: str
    file_sha256: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:80] or "imported"


def original_name(path: Path) -> str:
    """The imported file's name in the run folder: prefixed, so no file name can stand for run.json or the
    other names the store reads."""
    return ORIGINAL_PREFIX + _slug(path.name)


def lane_plan(imp: Imported, lane: str | None, recipe: str | None) -> dict[str, Any]:
    """The plan dict the run is stored under: the recipe's, resolved as it is today, when one is named;
    otherwise a lane named `lane` (default: the model's name) that is no recipe's."""
    from labkit.recipe import find_recipe, load_recipe, recipe_named

    variant_id = imp.setting.variant_id(imp.format)
    if recipe is not None:
        resolved = load_recipe(find_recipe(recipe)).resolve({})
        data = resolved.to_dict()
        data["variant_id"] = variant_id
        data["label"] = lane or f"{data.get('label') or data['recipe']} ({imp.tool})"
    else:
        name = _slug(lane or f"import-{imp.model.split('/')[-1]}")
        found = recipe_named(name)
        if found is not None:
            raise ImportFileError(
                f"--lane {name!r} names the recipe {found!r}: pass --recipe {found} to tie the import to it, or "
                "choose another lane name"
            )
        data = {
            "recipe": name,
            "variant_id": variant_id,
            "label": lane or name,
            "variants": {},
            "resolved": {},
        }
    data["imported"] = {
        "format": imp.format,
        "tool": imp.tool,
        "setting": imp.setting.to_dict(),
        "compared": {"tool": imp.tool, **imp.setting.comparable()},  # the plan the gate compares
    }
    data["simulated"] = False
    return data


def figure_rows(imp: Imported) -> tuple[dict[str, float], dict[str, dict[str, Any]], dict[str, str]]:
    """(measures, measure_info, method) of one result: every figure under `<format>:<field>`, and an exact one
    also under its labkit key; a figure that speaks of a load measure at the file's level (load_ttft@rate=2@stat=p99)
    says so in its measure_info row (`load_about`, converted), never under the labkit key, as no tool's
    definition is labkit's."""
    measures: dict[str, float] = {}
    info: dict[str, dict[str, Any]] = {}
    method: dict[str, str] = {}
    taken: set[str] = set()  # load measures already spoken of (median_ttft_ms and p50_ttft_ms: the first)
    for name, value in imp.figures.items():
        d = definition(imp.format, name)
        if d is None:  # a reader keeps only defined fields: this is labkit's own mistake
            raise LabkitError(f"{imp.format} field {name!r} has no row in the definition table")
        key = d.key_of(name)
        measures[key] = value
        ident = f"{key}@{imp.qualifier[0]}" if imp.qualifier else key  # one branch of it: an id of its own
        row: dict[str, Any] = {"definition": ident, "unit": d.unit, "source": SOURCE}
        why = f"; {imp.qualifier[1]}" if imp.qualifier else ""
        method[key] = f"{imp.tool_label}: {d.text} ({d.cite}{why})"
        labkit_key = d.labkit_key(imp.setting)
        converted = d.converted(value) if labkit_key else None
        if labkit_key and converted is not None:
            row.update(about=labkit_key, convert=d.convert, converted=converted, exact=d.exact)
            if d.exact:
                measures[labkit_key] = converted
                info[labkit_key] = {"definition": ident, "exact": True, "source": SOURCE}
                method[labkit_key] = f"exact conversion ({d.convert}) of {key}: {method[key]}"
        load_key = d.load_key(name, imp.setting)
        if load_key and load_key not in taken:  # the labkit load measure of the file's level: never exact
            taken.add(load_key)
            row.update(
                load_about=load_key,
                load_convert=d.load_convert,
                load_converted=d.load_converted(value),
                load_differs=d.load_differs,
            )
        info[key] = row
    return measures, info, method


def result_digest(imp: Imported) -> str:
    """The hash of one result's content (format, tool, setting, figures, what the file says of it), not of
    the file: the same result has one run id in whichever file it arrives, so a JSON Lines file appended to
    keeps its earlier lines' ids."""
    content = {
        "format": imp.format,
        "tool": [imp.tool, imp.tool_version],
        "setting": imp.setting.to_dict(),
        "figures": imp.figures,
        "provenance": imp.provenance,
        "counts": [imp.ok, imp.failed],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def summary_of(imp: Imported, file_name: str) -> tuple[RunSummary, dict[str, dict[str, Any]]]:
    """(the run summary, measure_info) one result gives: every figure under its own name and definition."""
    figures, info, method = figure_rows(imp)
    measures: dict[str, float | None] = dict(figures)
    counts = [] if imp.failed is not None else ["the file does not count failed requests"]
    summary = RunSummary(
        measures=dict(measures),
        n_ok=imp.ok or 0,
        n_failed=imp.failed or 0,
        method=method,
        notes=[f"imported from {file_name} ({imp.tool_label}, result {imp.index})", *imp.notes, *counts],
    )
    return summary, info


def prepare(
    imp: Imported, file_name: str, lane: str | None, recipe: str | None, file_sha256: str
) -> Prepared:
    """One result made ready to store (plan, run id, summary, definitions), nothing written yet."""
    summary, info = summary_of(imp, file_name)
    fingerprint = result_digest(imp)
    return Prepared(
        imported=imp,
        plan=lane_plan(imp, lane, recipe),
        run_id=f"{RUN_PREFIX}{fingerprint[:16]}",
        summary=summary,
        measure_info=info,
        fingerprint=fingerprint,
        file_sha256=file_sha256,
    )


def provenance(imp: Imported, path: Path, data: bytes) -> dict[str, Any]:
    """run.json's provenance of an import: the file, the tool, and "unknown" for what it does not carry."""
    return {
        "source": SOURCE,
        "tool": imp.tool,
        "tool_version": imp.tool_version,
        "format": imp.format,
        "file": path.name,
        "file_sha256": hashlib.sha256(data).hexdigest(),
        "file_bytes": len(data),
        "result_index": imp.index,
        "imported_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "unread_keys": list(imp.unread),
        "requests_ok": imp.ok if imp.ok is not None else UNKNOWN,
        "requests_failed": imp.failed if imp.failed is not None else UNKNOWN,
        **{key: UNKNOWN for key in NOT_CARRIED},
        **imp.provenance,
        "engine_version": imp.provenance.get("engine_version") or UNKNOWN,
    }


def read_file(
    path: str | Path, fmt: str | None = None, options: ReadOptions = DEFAULT_OPTIONS
) -> tuple[list[Imported], bytes]:
    """Every result the file holds, read and checked; nothing is stored."""
    loaded = load(path)
    found = detect(loaded, FORMATS, fmt)
    results = found.read(loaded, options)
    if not results:
        raise ImportFileError(f"{loaded.path}: the file holds no result ({found.name})")
    return results, loaded.data


def earlier_import(store: ResultsStore, p: Prepared, by_file: dict[tuple[str, int], Path]) -> Path | None:
    """The folder where this result was imported before, when it was (under this lane and variant: left as it
    is); ImportFileError when it was imported elsewhere, under another id (`by_file`: earlier imports by their
    file's hash and result index) or that folder is not a complete import of it, since one result in two
    places would be counted twice, or hide one of them from the tables."""
    here = store.run_dir(p.plan["recipe"], p.plan["variant_id"], p.run_id)
    folders = store.find(p.run_id)
    for folder in folders:
        if folder != here:
            raise ImportFileError(
                f"result {p.imported.index} of this file is already imported as {folder}; a result is stored "
                f"once: remove that folder on purpose to store it under {here.parent.parent.name}"
            )
    before = by_file.get((p.file_sha256, p.imported.index))
    if before is not None and before.name != p.run_id:
        raise ImportFileError(
            f"result {p.imported.index} of this file was imported before as {before} (an earlier labkit's run "
            "id); remove that folder on purpose to import it again"
        )
    if not folders:
        if here.exists():
            raise ImportFileError(
                f"{here}: the folder exists but holds no run.json; remove it on purpose first"
            )
        return None
    stored = read_run(here)
    if stored.imported is None or stored.imported.fingerprint != p.fingerprint or stored.status != "complete":
        raise ImportFileError(
            f"{here}: an import of this result exists with other figures (or is not complete); remove the "
            "folder on purpose to import it again"
        )
    return here


def imports_by_file(store: ResultsStore) -> dict[tuple[str, int], Path]:
    """{(file sha256, result index): folder} of every import stored under the root."""
    out: dict[tuple[str, int], Path] = {}
    for folder in store.run_folders():
        if folder.name.startswith(RUN_PREFIX):
            prov = read_run(folder).provenance
            out[(str(prov.file_sha256), prov.result_index or 0)] = folder
    return out


def import_file(
    path: str | Path,
    *,
    lane: str | None = None,
    recipe: str | None = None,
    fmt: str | None = None,
    results: str | Path | None = None,
    options: ReadOptions = DEFAULT_OPTIONS,
) -> list[ImportOutcome]:
    """Store each result of the file as a run (source "import"); an identical earlier import is left alone."""
    path = Path(path)
    found, data = read_file(path, fmt, options)
    digest = hashlib.sha256(data).hexdigest()
    prepared = [prepare(imp, path.name, lane, recipe, digest) for imp in found]
    store = ResultsStore(results)
    by_file = imports_by_file(store)
    existing = {
        p.run_id: folder for p in prepared if (folder := earlier_import(store, p, by_file)) is not None
    }
    outcomes: list[ImportOutcome] = []
    for p in prepared:  # every check is made: now the writes
        if p.run_id in existing:
            outcomes.append(ImportOutcome(p.run_id, existing[p.run_id], "unchanged", p.imported))
            continue
        twin = next((o for o in outcomes if o.run_id == p.run_id), None)
        if twin is not None:  # the file holds this very result twice: one run, said so
            outcomes.append(ImportOutcome(p.run_id, twin.path, "duplicate", p.imported))
            continue
        with store.new_run(
            p.plan,
            run_id=p.run_id,
            source=SOURCE,
            simulated=False,
            provenance=provenance(p.imported, path, data),
            imported={"fingerprint": p.fingerprint, "setting": p.imported.setting.to_dict()},
        ) as run:
            run.write_text(original_name(path), data.decode("utf-8"))  # the file itself, byte for byte
            run.finish(p.summary, boot={"source": SOURCE}, measure_info=p.measure_info)
        outcomes.append(ImportOutcome(p.run_id, run.path, "created", p.imported))
    return outcomes
