"""Which points of a sweep are already measured: a re-run skips points whose stored runs have identical
provenance (recipe content, engine image, engine version, labkit version) and refuses to add new points to a
sweep measured under different provenance (docs/sweeps.md, "Resuming a sweep"). Pure: records and stored
runs in, decisions out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit import __version__
from labkit.errors import LabkitError
from labkit.recipe import LanePlan
from labkit.report import images
from labkit.store import StoredBoot, StoredPlan, StoredRun

# the facts that must be identical for runs to belong to one sweep; the last two are known only after boot
PRE_BOOT = ("recipe content", "labkit version")
AFTER_BOOT = ("engine image", "engine version")


class SweepRefused(LabkitError):
    """Stored points and this run of the sweep differ in provenance; `fresh` measures every point anew."""


def fingerprint(doc: StoredRun) -> dict[str, str]:
    """The provenance facts of one stored run."""
    return facts(doc.plan, doc.boot, doc.labkit_version)


def facts(plan: StoredPlan, boot: StoredBoot, labkit_version: str | None) -> dict[str, str]:
    """The provenance facts of a plan, its boot facts and the labkit that measured on them."""
    return {
        "recipe content": plan.recipe_hash or "not recorded",
        "labkit version": labkit_version or "not recorded",
        "engine image": images(boot, plan),
        "engine version": boot.engine_version or "not recorded",
    }


def boot_fingerprint(plan: LanePlan, boot: Mapping[str, Any]) -> dict[str, str]:
    """The same facts for a lane booted now (its plan and BootFacts.to_dict())."""
    return facts(StoredPlan.of(plan.to_dict()), StoredBoot.of(boot), __version__)


@dataclass
class Resume:
    """What a re-run may skip: {variant id: its run ids}, and the engine facts those runs share (compared
    with the first boot of this run)."""

    done: dict[str, list[str]] = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)
    engine_swept: bool = False  # the sweep walks the engine itself (image, version): nothing to hold to

    def check_boot(self, now: Mapping[str, str]) -> None:
        """SweepRefused when the lane booted now runs another image or engine version than the points
        measured before it (stored, or earlier in this run); otherwise later boots are held to this one."""
        if self.engine_swept:
            return
        diffs = [
            f"{k} {self.engine[k]} (now {now.get(k)})"
            for k in AFTER_BOOT
            if self.engine.get(k, now.get(k)) != now.get(k)
        ]
        if diffs:
            raise SweepRefused(
                "the points measured before this boot ran "
                + "; ".join(diffs)
                + ": nothing was measured on it; `--fresh` measures every point anew (stored runs stay)"
            )
        self.engine.update({k: str(now.get(k)) for k in AFTER_BOOT})


def plan_resume(
    old_points: Sequence[Any],
    plans: Sequence[LanePlan],
    docs: Mapping[str, StoredRun],
    label: str,
    engine_swept: bool = False,
) -> Resume:
    """The points of the stored record (`old_points`: SweepPoint) that this run may skip. A point counts as
    done when it was measured and every listed run is stored complete; SweepRefused names every point whose
    runs differ from now in recipe content or labkit version, or when the done points disagree among
    themselves on the engine. A point with fewer runs than its plan asks for now is measured again.
    `docs`: run id -> the stored runs the record lists."""
    by_id = {p.variant_id: p for p in plans}
    out, problems = Resume(engine_swept=engine_swept), []
    engines: dict[str, set[str]] = {k: set() for k in AFTER_BOOT}
    for point in old_points:
        plan = by_id.get(point.variant_id)
        if plan is None or point.status not in ("measured", "resumed") or len(point.runs) < plan.measure.runs:
            continue  # not measured, or with fewer runs than asked for now: measure it again
        stored = [d for r in point.runs if (d := docs.get(r)) is not None and d.status == "complete"]
        if len(stored) < len(point.runs):
            continue  # a listed run is gone or unfinished: measure the point again
        now = {"recipe content": plan.recipe_hash, "labkit version": __version__}
        for d in stored:
            fp = fingerprint(d)
            for k in PRE_BOOT:
                if fp[k] != now[k]:
                    problems.append(f"{point.variant_id} (run {d.run_id}): {k} {fp[k]}, now {now[k]}")
            for k in AFTER_BOOT:
                engines[k].add(fp[k])
        out.done[point.variant_id] = list(point.runs)
    for k, seen in engines.items():
        if engine_swept:
            break
        if len(seen) > 1:
            problems.append(f"the measured points mix {k}s: {', '.join(sorted(seen))}")
        elif seen:
            out.engine[k] = seen.pop()
    if problems:
        raise SweepRefused(
            f"sweep {label}: its stored points differ from this run in provenance: "
            + "; ".join(problems[:6])
            + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
            + ". Mixing them would compare unlike lanes: `--fresh` measures every point anew (stored runs stay)"
        )
    return out
