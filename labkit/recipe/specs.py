"""What a lane runs and where: the frozen model, engine and cluster parts of a `LanePlan`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from labkit.recipe.launch import DockerOptions, FabricSpec


@dataclass(frozen=True)
class ModelSpec:
    repo: str
    revision: str
    path: str | None  # explicit path on the nodes, overrides the shared-cache snapshot path
    served_name: str | None
    loops: bool = (
        False  # its greedy output repeats by nature (random weights): loops are reported, not gating
    )

    @property
    def cache_dir_name(self) -> str:
        """The HF hub cache folder name: models--org--name."""
        return "models--" + self.repo.replace("/", "--")


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class EngineSpec:
    kind: str
    image: str | None
    runtime: str
    port: int
    version: str | None
    multinode: str
    parallel: Parallel
    args: tuple[tuple[str, tuple[str, ...]], ...]  # (flag, values); () is a bare flag
    env: tuple[tuple[str, str], ...]
    boot_timeout: float
    docker: DockerOptions = DockerOptions()
    drop_caches: bool = False  # drop every node's page cache before boot (best effort, sudo -n)

    def argv(self) -> list[str]:
        out: list[str] = []
        for flag, values in self.args:
            out.append(flag)
            out.extend(values)
        return out

    def arg(self, flag: str) -> tuple[str, ...] | None:
        """Values of one flag, () for a bare flag, None when absent."""
        return dict(self.args).get(flag)


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[str, ...]
    user: str | None
    ssh_port: int
    shared_cache: str | None
    head_address: (
        str | None
    )  # the client/readiness address only; the rendezvous uses the head's fabric address
    connect_timeout: float
    gpus_per_node: int = 1
    fabric: FabricSpec | None = None
    min_free_memory: int | None = None  # bytes of MemAvailable each node needs before boot; None: no minimum
    min_free_after_drop: int | None = None  # bytes of MemFree each node needs after the page-cache drop
    device: str | None = (
        None  # the GPU model (e.g. "GB10"): its nominal bandwidth for the roofline before a probe
    )

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def is_local(self) -> bool:
        return self.nodes == ("localhost",)


def shell_command(argv: list[str]) -> str:
    """One argv as a copy-pasteable shell line (every argument quoted as needed)."""
    return shlex.join(argv)
