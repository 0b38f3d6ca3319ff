"""Rewrite the worked example of docs/roofline.md (between its markers) from the dsv41 lane's committed
checkpoint facts; tests/roofline/test_dsv41.py fails until this has been run after a change to the model.

    .venv/bin/python tools/roofline_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.roofline import Parallel, load_checkpoint  # noqa: E402
from labkit.roofline.describe import cases, table  # noqa: E402
from labkit.roofline.devices import NOMINAL_FABRIC, NOMINAL_MEMORY  # noqa: E402
from tools.docgen import REPO, rewrite  # noqa: E402

DOC = REPO / "docs" / "roofline.md"
CHECKPOINT = REPO / "recipes" / "dsv41-flash-1017-4x-vllm032" / "checkpoint"
CONTEXT = 8192  # an agent's turn: the KV each sequence holds in the example


def worked_example() -> str:
    """The DeepSeek-V4.1-Flash lane on four GB10s, TP4: c1 and c2, plain and with DSpark K5 at tau <= 6."""
    ck = load_checkpoint(CHECKPOINT)
    assert ck is not None, CHECKPOINT
    shown = cases([1, 2], 5, "dspark")
    text = table(ck, Parallel(tp=4, gpus=4), shown, CONTEXT, NOMINAL_MEMORY["GB10"], NOMINAL_FABRIC)
    return "```\n" + text + "\n```"


if __name__ == "__main__":
    rewrite(DOC, {"dsv41-example": worked_example()})
    print(f"wrote the worked example of {DOC}")
