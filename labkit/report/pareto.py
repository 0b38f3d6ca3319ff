"""The trade-off view of a sweep: one marker per point, a cost on each axis (lower is better on both), the Pareto
front drawn through the means, and the points whose interval reaches the front marked indistinguishable from it
(docs/sweeps.md, "The trade-off plot"); the same plane for rates, where higher is better (vLLM's own view of a
sweep: output tokens/s per user against per GPU).

Why its own module: a prefill lever moves time from an arriving prompt to the streams already decoding, so no
single measure ranks the points; the front says which points are worth keeping, and the intervals say which of
the others the runs cannot tell apart from it. The front and the marks are pure (`front`, `indistinguishable`),
the drawing reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cost:
    """One point on the plane: its label, the mean of each cost over its runs and the low end of each
    interval (the lowest run value from fewer than 3 runs)."""

    label: str
    x: float
    y: float
    x_low: float
    y_low: float


def _dominates(ax: float, ay: float, bx: float, by: float) -> bool:
    """(ax, ay) is no worse on both costs and better on one."""
    return ax <= bx and ay <= by and (ax < bx or ay < by)


def front(points: Sequence[Cost]) -> list[int]:
    """Indices of the points no other point dominates on the means, in order of x."""
    keep = [
        i
        for i, p in enumerate(points)
        if not any(_dominates(q.x, q.y, p.x, p.y) for j, q in enumerate(points) if j != i)
    ]
    return sorted(keep, key=lambda i: (points[i].x, points[i].y))


def indistinguishable(points: Sequence[Cost], on_front: Sequence[int]) -> list[int]:
    """Indices of the points off the front that no front point dominates at the low end of their intervals:
    the runs cannot tell them from the front."""
    return [
        i
        for i, p in enumerate(points)
        if i not in on_front
        and not any(_dominates(points[j].x, points[j].y, p.x_low, p.y_low) for j in on_front)
    ]


# points this close (shares of each axis's span: about a label's width and height on the panel) share one label
SAME_SPOT = (0.12, 0.08)


def spots(points: Sequence[Cost]) -> dict[tuple[float, float], list[str]]:
    """{(x, y) of the first point of a group: the labels of the points drawn about there}: points within SAME_SPOT
    of the first of a group are one group, so their labels do not overwrite each other."""
    span_x = (max(p.x for p in points) - min(p.x for p in points)) or 1.0
    span_y = (max(p.y for p in points) - min(p.y for p in points)) or 1.0
    out: dict[tuple[float, float], list[str]] = {}
    for p in points:
        at = next(
            (
                k
                for k in out
                if abs(k[0] - p.x) <= SAME_SPOT[0] * span_x and abs(k[1] - p.y) <= SAME_SPOT[1] * span_y
            ),
            (p.x, p.y),
        )
        out.setdefault(at, []).append(p.label)
    return out


def draw(ax: Any, points: Sequence[Cost], title: str, labels: tuple[str, str], gains: bool = False) -> None:
    """The plane on `ax`, its axes labelled (x, y): every point a marker with its label, the front a line through
    the means, points on it filled, indistinguishable ones hollow in the front's colour, the others hollow grey.
    `gains`: the points are rates (higher is better) given as negated costs, drawn at their rates."""
    best = front(points)
    close = set(indistinguishable(points, best))
    if gains:
        points = [Cost(p.label, -p.x, -p.y, -p.x_low, -p.y_low) for p in points]
    _draw(ax, points, best, close, title, labels)


def _draw(
    ax: Any, points: Sequence[Cost], best: list[int], close: set[int], title: str, labels: tuple[str, str]
) -> None:
    if not points:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    ax.plot([points[i].x for i in best], [points[i].y for i in best], "-", color="#2c7fb8", lw=1, zorder=1)
    for i, p in enumerate(points):
        if i in best:
            style = dict(color="#2c7fb8", mfc="#2c7fb8")
        elif i in close:
            style = dict(color="#2c7fb8", mfc="white")
        else:
            style = dict(color="#999999", mfc="white")
        ax.plot([p.x], [p.y], "o", ms=7, zorder=2, **style)
    for (x, y), names in spots(points).items():
        ax.annotate(" / ".join(names), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.plot([], [], "o", color="#2c7fb8", label="on the front (means)")
    if close:
        ax.plot([], [], "o", color="#2c7fb8", mfc="white", label="indistinguishable from it")
    if len(best) < len(points) - len(close):
        ax.plot([], [], "o", color="#999999", mfc="white", label="dominated")
    ax.legend(fontsize=6)
    ax.set_xlabel(labels[0], fontsize=8)
    ax.set_ylabel(labels[1], fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.margins(0.15)
