"""What a lane stages before boot: one frozen `[[staging]]` entry, and where a local view is mounted."""

from __future__ import annotations

from dataclasses import dataclass

VIEW_MOUNT = "/root/.cache/hf-view"  # the container path of a local view (staging.mount's default)


@dataclass(frozen=True)
class StagingSpec:
    kind: str
    repo: str
    revision: str
    dst: str
    local: tuple[str, ...]
    min_free: int
    mount: str
    verify: str = "sampled"  # sampled | deep: how staging checks the copies (docs/staging.md)
    fanout: bool | None = None  # None: on when the lane has more than one node (docs/fanout.md)
