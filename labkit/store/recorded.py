"""Import figures a person recorded in a lab note (results/recorded.toml) as runs with honest provenance.

The lab note's numbers predate labkit; storing them as runs (source "recorded", no raw samples) lets the
report regenerate the note's tables from files instead of someone retyping them. Importing is
idempotent: a run id is derived from the entry's date and key, an existing identical run is left alone,
and a changed entry is refused rather than overwriting a committed run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from labkit.errors import LabkitError
from labkit.measure import RunSummary
from labkit.recipe import read_toml
from labkit.store.files import RUN_FILE
from labkit.store.load import read_run
from labkit.store.runs import ResultsStore

RECORDED_FILE = "recorded.toml"
_MEASURE_KEYS = {"value", "min", "max", "approx", "note"}


class RecordedError(LabkitError):
    """recorded.toml is malformed: names the file and the entry."""


def default_figures_file() -> Path:
    from labkit.recipe import checkout

    return checkout() / "results" / RECORDED_FILE


@dataclass(frozen=True)
class RecordedRun:
    key: str
    recipe: str
    variants: dict[str, str]
    date: dt.date
    measures: dict[str, float | None]
    measure_info: dict[str, dict[str, Any]]
    provenance: dict[str, Any]
    boot: dict[str, Any]
    notes: list[str]
    label: str | None

    @property
    def run_id(self) -> str:
        return f"{self.date:%Y%m%d}-recorded-{self.key}"

    def fingerprint(self) -> str:
        """Hash of the figures and their reading; decides 'unchanged' vs 'changed' on re-import."""
        blob = json.dumps(
            {"m": self.measures, "i": self.measure_info, "v": self.variants, "r": self.recipe}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordedError(f"{where}: expected a number, got {value!r}")
    return value


def _measure(name: str, raw: Any, where: str) -> tuple[float | None, dict[str, Any]]:
    if not isinstance(raw, dict):
        return _number(raw, where), {}
    unknown = set(raw) - _MEASURE_KEYS
    if unknown:
        raise RecordedError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: "
            f"{', '.join(sorted(_MEASURE_KEYS))}"
        )
    info: dict[str, Any] = {}
    value = _number(raw["value"], f"{where}.value") if "value" in raw else None
    if ("min" in raw) != ("max" in raw):
        raise RecordedError(f"{where}: a range needs both min and max")
    if "min" in raw:
        lo, hi = _number(raw["min"], f"{where}.min"), _number(raw["max"], f"{where}.max")
        if lo > hi:
            raise RecordedError(f"{where}: min {lo} is above max {hi}")
        info.update(min=lo, max=hi, kind="recorded range")
    if value is None and "min" not in raw:
        raise RecordedError(f"{where}: give value, or min and max")
    if raw.get("approx"):
        info["approx"] = True
    if raw.get("note"):
        info["note"] = str(raw["note"])
    return value, info


def parse_figures(path: str | Path | None = None) -> list[RecordedRun]:
    """Read and validate recorded.toml; RecordedError names the file and entry on any problem."""
    file = Path(path) if path else default_figures_file()
    data = read_toml(file, RecordedError)
    defaults = data.get("defaults", {})
    out, seen = [], set()
    for i, entry in enumerate(data.get("run", [])):
        where = f"{file}: run[{i}]"
        merged = {**defaults, **entry}
        for key in ("key", "recipe", "date", "note", "measures"):
            if key not in merged:
                raise RecordedError(f"{where}: missing '{key}'")
        key = str(merged["key"])
        if key in seen:
            raise RecordedError(f"{where}: duplicate key {key!r}")
        seen.add(key)
        if not isinstance(merged["date"], dt.date):
            raise RecordedError(f"{where}.date: expected a TOML date like 2026-10-23")
        measures, info = {}, {}
        for name, raw in merged["measures"].items():
            value, extra = _measure(name, raw, f"{where}.measures.{name}")
            measures[name] = value
            if extra:
                info[name] = extra
        provenance = {
            "source": "recorded",
            "note": merged["note"],
            "document": merged.get("document", ""),
            "section": merged.get("section", ""),
            "engine_version": merged.get("engine_version", ""),
            "raw_samples": False,
            "plan_note": "plan = the recipe as resolved at import; the recorded runs predate labkit and their "
            "exact flags are only what the note states",
            # Stored in every imported run.json (the module is labkit/store/recorded.py now): changing the
            # text would make the committed runs differ from a re-import, which must stay idempotent.
            "imported_by": "labkit import-note (labkit/recorded.py) from results/recorded.toml",
        }
        out.append(
            RecordedRun(
                key=key,
                recipe=str(merged["recipe"]),
                variants=dict(merged.get("variants", {})),
                date=merged["date"],
                measures=measures,
                measure_info=info,
                provenance=provenance,
                boot={"source": "recorded", **dict(merged.get("boot", {}))},
                notes=list(merged.get("notes", [])),
                label=merged.get("label"),
            )
        )
    return out


@dataclass
class ImportOutcome:
    key: str
    run_id: str
    path: Path
    action: Literal["created", "unchanged"]


def _plan_for(entry: RecordedRun) -> dict[str, Any]:
    """The lane plan as the recipe resolves it today: ties the figures to a recipe and variant that exist."""
    from labkit.recipe import checkout, find_recipe, load_recipe

    try:
        folder = find_recipe(entry.recipe)
        plan = load_recipe(folder).resolve(entry.variants).to_dict()
    except LabkitError as e:
        raise RecordedError(f"recorded run {entry.key!r}: {e}")
    try:  # a stable, checkout-relative path in committed files, whatever the caller's cwd
        plan["file"] = str((folder / "recipe.toml").resolve().relative_to(checkout()))
    except ValueError:
        plan["file"] = str(folder / "recipe.toml")
    return plan


def _stored_folder(store: ResultsStore, recipe: str, run_id: str) -> Path | None:
    """The folder a recorded run already has under its recipe, whatever variant it was recorded under: the
    recipe may have gained an axis since (its variant id today is longer), and a recorded run keeps its own."""
    found = [p for p in store.find(run_id) if p.parent.parent.name == recipe]
    if len(found) > 1:
        raise RecordedError(
            f"recorded run {run_id} is stored more than once under {recipe}: "
            f"{', '.join(str(p) for p in found)}; keep one on purpose"
        )
    return found[0] if found else None


def import_figures(path: str | Path | None = None, results: str | Path | None = None) -> list[ImportOutcome]:
    """Create one run folder per recorded entry that is not there yet. Refuses (and writes nothing more) when
    an existing recorded run's figures differ from the file."""
    entries = parse_figures(path)
    store = ResultsStore(results)
    plans = {e.key: _plan_for(e) for e in entries}  # validate everything before writing anything
    outcomes = []
    for entry in entries:
        plan = plans[entry.key]
        folder = _stored_folder(store, plan["recipe"], entry.run_id) or store.run_dir(
            plan["recipe"], plan["variant_id"], entry.run_id
        )
        if (folder / RUN_FILE).exists():
            stored = read_run(folder)
            if (
                stored.recorded is None
                or stored.recorded.fingerprint != entry.fingerprint()
                or stored.status != "complete"
            ):
                raise RecordedError(
                    f"{folder}: a recorded run with this key exists but its figures differ from "
                    f"the file (or it is not complete); remove the folder on purpose to re-import"
                )
            outcomes.append(ImportOutcome(entry.key, entry.run_id, folder, "unchanged"))
            continue
        summary = RunSummary(
            measures=dict(entry.measures),
            n_ok=0,
            n_failed=0,
            method={name: entry.provenance["note"] for name in entry.measures},
            notes=entry.notes,
        )
        with store.new_run(
            plan,
            run_id=entry.run_id,
            label=entry.label,
            source="recorded",
            provenance=entry.provenance,
            recorded={"key": entry.key, "date": entry.date.isoformat(), "fingerprint": entry.fingerprint()},
        ) as run:
            run.finish(summary, boot=entry.boot, measure_info=entry.measure_info)
        outcomes.append(ImportOutcome(entry.key, entry.run_id, folder, "created"))
    return outcomes
