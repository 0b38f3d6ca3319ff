"""A stored run as frozen dataclasses: run.json parsed once, where it is read, so readers use attributes.

The parts other packages read are typed (plan, provenance, boot facts in runparts.py; here the summary and
its flags, per-measure facts, the recorded and imported marks); the rest of each part stays reachable as
`raw`, the JSON object it was parsed from. A part of the wrong shape is a ResultsError naming the file and the
dotted key; absent parts (older runs, recorded figures, imports) get the empty value their readers assume.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from labkit.store.files import RUN_FILE, RUN_SCHEMA_VERSION, ResultsError
from labkit.store.runparts import Part, Provenance, StoredBoot, StoredPlan, one_of

RunStatus = Literal["incomplete", "complete", "failed"]
RunSource = Literal["measured", "recorded", "import"]
STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
SOURCES: tuple[RunSource, ...] = get_args(RunSource)


@dataclass(frozen=True)
class RunFlag:
    """An evidence flag of the summary (docs/measurement.md, "Per-run evidence"); `window` None or a name
    outside the windows covers the whole run."""

    code: str
    window: str | None = None
    message: str = ""

    @classmethod
    def parse(cls, part: Part) -> RunFlag:
        code = part.text("code")
        if code is None:
            raise ResultsError(f"{part.file}: {part.at('code')}: missing")
        return cls(code, part.text("window"), part.text("message") or "")


@dataclass(frozen=True)
class StoredSummary:
    """The summary's figures (measures: None where a window was invalid), how each was obtained, its flags;
    `raw` holds the rest (evidence, sanity, telemetry, samples): RunSummary.from_dict(raw) rebuilds it."""

    measures: Mapping[str, float | None] = field(default_factory=dict)
    method: Mapping[str, str] = field(default_factory=dict)
    flags: tuple[RunFlag, ...] = ()
    n_ok: int = 0
    n_failed: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, part: Part) -> StoredSummary:
        measures = part.part("measures")
        method = part.part("method")
        flags = part.items("flags")
        return cls(
            measures={k: measures.number(k) for k in measures.data},
            method={k: method.text(k) or "" for k in method.data},
            flags=tuple(
                RunFlag.parse(Part(f, part.file, f"{part.at('flags')}[{i}]")) for i, f in enumerate(flags)
            ),
            n_ok=part.whole("n_ok") or 0,
            n_failed=part.whole("n_failed") or 0,
            raw=part.data,
        )


@dataclass(frozen=True)
class MeasureInfo:
    """What a float cannot carry about one figure (measure_info): a recorded range and whether it was
    approximate; for an imported figure its definition id and, when it speaks of a labkit measure (`about`),
    the conversion into that measure's unit (docs/imports.md, "Definitions")."""

    value: float | None = None
    min: float | None = None
    max: float | None = None
    approx: bool = False
    definition: str | None = None
    about: str | None = None
    convert: str | None = None
    converted: float | None = None
    exact: bool = False
    # an imported figure's labkit load measure at the file's level, beside `about` (docs/imports.md)
    load_about: str | None = None
    load_convert: str | None = None
    load_converted: float | None = None
    load_differs: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, part: Part) -> MeasureInfo:
        return cls(
            value=part.number("value"),
            min=part.number("min"),
            max=part.number("max"),
            approx=bool(part.truth("approx")),
            definition=part.text("definition"),
            about=part.text("about"),
            convert=part.text("convert"),
            converted=part.number("converted"),
            exact=bool(part.truth("exact")),
            load_about=part.text("load_about"),
            load_convert=part.text("load_convert"),
            load_converted=part.number("load_converted"),
            load_differs=part.text("load_differs"),
            raw=part.data,
        )


@dataclass(frozen=True)
class RecordedMark:
    """`recorded` of a lab-note figure stored as a run: its key in recorded.toml, date and fingerprint."""

    key: str
    date: str
    fingerprint: str


@dataclass(frozen=True)
class ImportedMark:
    """`imported` of a run made from another tool's file: the result's fingerprint and its setting."""

    fingerprint: str
    setting: Mapping[str, Any]


@dataclass(frozen=True)
class StoredRun:
    """One run folder's run.json, parsed (see the module docstring); `path` is the run folder."""

    path: Path
    run_id: str
    schema_version: int
    status: RunStatus = "incomplete"
    source: RunSource = "measured"
    recipe: str = ""
    variant_id: str = ""
    variants: Mapping[str, str] = field(default_factory=dict)
    label: str = ""
    simulated: bool = False
    started: str | None = None
    finished: str | None = None
    labkit_version: str | None = None
    n_requests: int = 0
    error: str = ""
    boot_run: str | None = None  # the run that booted the kept lane this run ran on
    files: tuple[str, ...] = ()
    plan: StoredPlan = StoredPlan()
    provenance: Provenance = Provenance()
    boot: StoredBoot = StoredBoot()
    summary: StoredSummary = StoredSummary()
    measure_info: Mapping[str, MeasureInfo] = field(default_factory=dict)
    recorded: RecordedMark | None = None
    imported: ImportedMark | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


def parse_run(doc: object, path: Path) -> StoredRun:
    """run.json's parsed JSON (`doc`) of the run folder `path` as a StoredRun; ResultsError naming the file
    and key when it is no labkit run.json, of a newer schema, or a part has the wrong shape."""
    file = path / RUN_FILE
    if not isinstance(doc, Mapping) or "run_id" not in doc:
        raise ResultsError(f"{file}: not a labkit run.json (no run_id)")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > RUN_SCHEMA_VERSION:
        raise ResultsError(
            f"{file}: schema_version {version!r} is not supported (this labkit reads <= {RUN_SCHEMA_VERSION})"
        )
    top = Part(doc, file)
    run_id = top.text("run_id")
    if not run_id:
        raise ResultsError(f"{file}: run_id: expected a run id, found {run_id!r}")
    variants = top.part("variants")
    recorded, imported = top.part("recorded"), top.part("imported")
    return StoredRun(
        path=path,
        run_id=run_id,
        schema_version=version,
        status=one_of(STATUSES, top.text("status") or "incomplete", file, "status"),
        source=one_of(SOURCES, top.text("source") or "measured", file, "source"),
        recipe=top.text("recipe") or "",
        variant_id=top.text("variant_id") or "",
        variants={k: variants.text(k) or "" for k in variants.data},
        label=top.text("label") or "",
        simulated=bool(top.truth("simulated")),
        started=top.text("started"),
        finished=top.text("finished"),
        labkit_version=top.text("labkit_version"),
        n_requests=top.whole("n_requests") or 0,
        error=top.text("error") or "",
        boot_run=top.text("boot_run"),
        files=top.texts("files"),
        plan=StoredPlan.parse(top.part("plan")),
        provenance=Provenance.parse(top.part("provenance")),
        boot=StoredBoot.parse(top.part("boot")),
        summary=StoredSummary.parse(top.part("summary")),
        measure_info={k: MeasureInfo.parse(p) for k, p in top.parts("measure_info").items()},
        recorded=RecordedMark(
            recorded.text("key") or "", recorded.text("date") or "", recorded.text("fingerprint") or ""
        )
        if recorded.data
        else None,
        imported=ImportedMark(imported.text("fingerprint") or "", imported.part("setting").data)
        if imported.data
        else None,
        raw=doc,
    )
