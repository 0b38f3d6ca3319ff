"""What a person sees on a rendered figure, checked: no two text boxes overlap after layout (titles, axis
labels, tick labels, annotations, legends), and no panel squeezes its values into a corner of a linear axis."""

from __future__ import annotations

from typing import Any


def _boxes(fig: Any) -> list[tuple[str, Any]]:
    """(what, its window extent) of every visible, non-empty text box of the drawn figure; a legend is one box."""
    renderer = fig.canvas.get_renderer()
    out: list[tuple[str, Any]] = []

    def add(what: str, artist: Any) -> None:
        if artist is None or not artist.get_visible():
            return
        text = artist.get_text() if hasattr(artist, "get_text") else "legend"
        if not text or not str(text).strip():
            return
        out.append((f"{what} {str(text)[:40]!r}", artist.get_window_extent(renderer)))

    for t in fig.texts:  # the suptitle among them
        add("figure text", t)
    for i, ax in enumerate(fig.axes):
        where = f"axes {i}"
        for title in (ax.title, ax._left_title, ax._right_title):
            add(f"{where} title", title)
        add(f"{where} x label", ax.xaxis.label)
        add(f"{where} y label", ax.yaxis.label)
        xmin, xmax = sorted(ax.get_xlim())
        ymin, ymax = sorted(ax.get_ylim())
        for tick in ax.get_xticklabels(which="both"):
            if xmin - 1e-9 <= tick.get_position()[0] <= xmax + 1e-9:
                add(f"{where} x tick", tick)
        for tick in ax.get_yticklabels(which="both"):
            if ymin - 1e-9 <= tick.get_position()[1] <= ymax + 1e-9:
                add(f"{where} y tick", tick)
        for t in ax.texts:
            add(f"{where} text", t)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            out.append((f"{where} legend", legend.get_window_extent(renderer)))
    legend = fig.legends[0] if fig.legends else None
    if legend is not None:
        out.append(("figure legend", legend.get_window_extent(renderer)))
    return out


def text_overlaps(fig: Any, slack: float = 1.0) -> list[str]:
    """Every pair of text boxes of `fig` that overlap by more than `slack` pixels each way, drawn first (the
    layout engine runs at draw time); also any box that leaves the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    boxes = _boxes(fig)
    width, height = fig.canvas.get_width_height()
    found = []
    for what, b in boxes:
        if b.x0 < -slack or b.y0 < -slack or b.x1 > width + slack or b.y1 > height + slack:
            found.append(f"{what} leaves the figure")
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1 :]:
            dx = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            dy = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            if dx > slack and dy > slack:
                found.append(f"{a} overlaps {b}")
    return found
