"""The files of a run folder beside run.json: a bench result's raw files, the lane's boot facts and node logs
(RunFolderSink, the sink labkit.serve.Lane writes through), and the telemetry CSVs read back.

The names are the constants of labkit.store.files; serve never writes into a run folder itself.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from labkit.measure import BenchResult
from labkit.serve import BootFacts
from labkit.store.files import (
    BOOT_FILE,
    GROUPS_FILE,
    IO_FILE,
    LOGS_DIR,
    SCRAPES_FILE,
    STAGING_FILE,
    TELEMETRY_PREFIX,
    TELEMETRY_SUFFIX,
    atomic_write_text,
    node_log_name,
    telemetry_name,
)
from labkit.store.runs import Run


class RunFolderSink:
    """A lane's output into one run folder (labkit.serve.RunSink): logs/<node>.log appended as the lane reads
    each node's log, boot.json written atomically once the lane is ready."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def open(self) -> None:
        """Before the start commands: the folder for the node logs exists."""
        (self.path / LOGS_DIR).mkdir(parents=True, exist_ok=True)

    def node_log(self, node: str, text: str) -> None:
        with open(self.path / node_log_name(node), "a", encoding="utf-8") as f:
            f.write(text)

    def boot(self, facts: BootFacts) -> None:
        write_boot(self.path, facts)


def write_boot(folder: str | Path, facts: BootFacts) -> Path:
    """boot.json (the boot facts) into `folder`, atomically: a reader sees the old file or the whole new one."""
    out = Path(folder) / BOOT_FILE
    atomic_write_text(out, json.dumps(facts.to_dict(), indent=2) + "\n")
    return out


def write_result(run: Run, result: BenchResult) -> None:
    """The raw files of a BenchResult (requests, groups, scrapes, I/O deltas, telemetry) into a still-open run
    folder; also for a run that fails halfway, whose folder is then marked failed with what it measured: its
    run.json's `partial` then says how many requests, the error, and the summary of what was measured so far
    (not the run's `summary`, which only a finished run has: a failed run gives no figure to the tables), e.g.
    the load levels before the one an engine died in, and that level marked failed."""
    run.write_requests(result.records)
    if result.groups:
        run.write_text(GROUPS_FILE, csv_text([g.to_row() for g in result.groups]))
    if result.scrapes:
        run.write_text(SCRAPES_FILE, json_text(result.scrapes))
    if result.io:
        run.write_text(IO_FILE, json_text(result.io))
    for node, text in sorted(result.telemetry.items()):
        run.write_text(telemetry_name(node), text)  # raw samples, docs/measurement.md "Node telemetry"
    if result.provenance.get("partial"):
        run.update(
            partial={
                "requests": len(result.records),
                "error": result.provenance.get("error"),
                "summary": result.summary.to_dict(),
            }
        )


def write_staging(run: Run, report: dict[str, Any]) -> Path:
    """staging.json: what staging did on each node (labkit.stage.StageReport.to_dict())."""
    return run.write_text(STAGING_FILE, json_text(report))


def read_telemetry(folder: str | Path) -> dict[str, str]:
    """{node: its telemetry CSV text} of one run folder (none without telemetry)."""
    return {
        p.name[len(TELEMETRY_PREFIX) : -len(TELEMETRY_SUFFIX)]: p.read_text()
        for p in sorted(Path(folder).glob(f"{TELEMETRY_PREFIX}*{TELEMETRY_SUFFIX}"))
    }


def telemetry_rows(text: str) -> list[dict[str, str]]:
    """One telemetry CSV's rows (columns: labkit/measure/telemetry/health.py CSV_HEADER), values as text."""
    return list(csv.DictReader(io.StringIO(text)))


def csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def json_text(data: Any) -> str:
    """A side file's JSON (indent 1, anything else as its str), as the run folders have always held it."""
    return json.dumps(data, indent=1, default=str) + "\n"
