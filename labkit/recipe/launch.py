"""How a lane's engines reach each other and what their containers get: `[cluster.fabric]` and
`[engine.docker]` as frozen plan parts, and the persistent compile-cache mounts.

The fabric is the network the engines talk over (the DGX Spark's ConnectX-7 port): its interface for
NCCL/GLOO/TP sockets, its RoCE devices for NCCL_IB_HCA, and optionally each node's address on it. A node
without a listed address gets it detected at boot by the serve step. The management name in
`cluster.nodes` stays the SSH and client address; the rendezvous uses the head's fabric address.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from labkit.recipe.topology import DEFAULT_TOPOLOGY

# Host side of the compile caches: a literal `$HOME` the node's shell expands (so the runtime must leave it
# outside single quotes), then only [a-z./] characters; one folder per engine kind and cache.
COMPILE_CACHE_ROOT = "$HOME/.cache/labkit/compile"


@dataclass(frozen=True)
class CompileCache:
    """One persistent cache: its host folder's name, where the engine keeps it in the container, and the variable
    that points the engine there (set to `container` unless the recipe's env sets it; None: the default path)."""

    name: str
    container: str
    env: str | None = None


# Each engine's own JIT and compile caches (docs/engines.md, "Fabric addresses and environment").
COMPILE_CACHES: Mapping[str, tuple[CompileCache, ...]] = MappingProxyType(
    {
        # the set eugr's spark-vllm-docker keeps between boots
        "vllm": (
            CompileCache("vllm", "/root/.cache/vllm"),  # torch.compile artefacts and vLLM's own caches
            CompileCache("flashinfer", "/root/.cache/flashinfer"),  # FlashInfer JIT kernels
            CompileCache("triton", "/root/.triton"),  # Triton kernel cache
            CompileCache("tilelang", "/root/.tilelang"),  # TileLang kernel cache
        ),
        # SGLang's own root (DeepGEMM JIT, FlashInfer autotune results, JIT builds under jit/), TorchInductor
        # (default /tmp/torchinductor_<user>), and the kernel libraries' default folders, as sparkrun keeps them
        "sglang": (
            CompileCache("sglang", "/root/.cache/sglang", "SGLANG_CACHE_DIR"),
            CompileCache("inductor", "/root/.cache/torchinductor", "TORCHINDUCTOR_CACHE_DIR"),
            CompileCache("flashinfer", "/root/.cache/flashinfer"),
            CompileCache("triton", "/root/.triton"),
            CompileCache("tilelang", "/root/.tilelang"),
            CompileCache("tvmffi", "/root/.cache/tvm-ffi"),
        ),
        "llamacpp": (),  # llama-cpp-python compiles nothing at boot
        "sim": (),  # the simulator compiles nothing
    }
)


@dataclass(frozen=True)
class FabricSpec:
    """`[cluster.fabric]`: the interface (per node where ports differ) and RoCE HCAs the engines' traffic uses,
    known node addresses, and the cabling (`topology`, labkit.recipe.topology)."""

    interface: str  # netdev for NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME and the rendezvous
    hcas: tuple[str, ...] = ()  # NCCL_IB_HCA (both RoCE twins of the port on a Spark; all four in a ring)
    addresses: tuple[tuple[str, str], ...] = ()  # (node, numeric IP); a node not listed is detected at boot
    topology: str = DEFAULT_TOPOLOGY  # "switch" or "ring"
    interfaces: tuple[tuple[str, str], ...] = ()  # (node, netdev) where a node's port is not `interface`

    def address(self, node: str) -> str | None:
        """The node's fabric address from the recipe, None when it is to be detected at boot."""
        return dict(self.addresses).get(node)

    def interface_of(self, node: str | None) -> str:
        """The netdev `node` talks over: its own entry in `interfaces`, else `interface`."""
        return dict(self.interfaces).get(node or "", self.interface)

    @property
    def rdma(self) -> bool:
        return bool(self.hcas)

    @property
    def ring(self) -> bool:
        return self.topology == "ring"

    def for_nodes(self, nodes: tuple[str, ...]) -> FabricSpec:
        """The same fabric with addresses and interfaces kept only for `nodes` (after a nodes override)."""
        return dataclasses.replace(
            self,
            addresses=tuple((n, a) for n, a in self.addresses if n in nodes),
            interfaces=tuple((n, i) for n, i in self.interfaces if n in nodes),
        )


@dataclass(frozen=True)
class BindMount:
    """One `engine.docker.mounts` entry, "host:container[:ro]"."""

    host: str
    container: str
    read_only: bool = False

    @property
    def volume(self) -> str:
        """The value of `docker run -v`."""
        return f"{self.host}:{self.container}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class DockerOptions:
    """`[engine.docker]`: extra `docker run` options; the defaults add nothing."""

    privileged: bool | None = None  # None: not privileged, and RDMA access is given device by device
    devices: tuple[str, ...] = ()  # --device values, "host[:container][:perms]"
    cap_add: tuple[str, ...] = ()  # --cap-add values, upper case
    ulimits: tuple[tuple[str, str], ...] = ()  # (name, "soft:hard" or "n") for --ulimit name=value
    shm_size: str | None = None  # --shm-size value as docker reads it ("16g": binary units)
    mounts: tuple[BindMount, ...] = ()  # extra bind mounts
    compile_cache: bool = (
        False  # mount persistent per-node compile/JIT caches (LanePlan.compile_cache_mounts)
    )
    gpus: str = "all"  # --gpus value; "none" leaves the option out (a CPU lane)

    def ulimit(self, name: str) -> str | None:
        return dict(self.ulimits).get(name)


def fabric_spec(table: dict | None) -> FabricSpec | None:
    """The FabricSpec of a checked `cluster.fabric` table (None when the recipe has none)."""
    if table is None:
        return None
    return FabricSpec(
        interface=table["interface"],
        hcas=tuple(table["hcas"]),
        addresses=tuple(table["addresses"].items()),
        topology=table["topology"],
        interfaces=tuple(table["interfaces"].items()),
    )


def docker_options(table: dict) -> DockerOptions:
    """The DockerOptions of a checked `engine.docker` table."""
    mounts = []
    for text in table["mounts"]:
        host, container, *mode = text.split(":")
        mounts.append(BindMount(host, container, mode == ["ro"]))
    return DockerOptions(
        privileged=table["privileged"],
        devices=tuple(table["devices"]),
        cap_add=tuple(table["cap_add"]),
        ulimits=tuple(table["ulimits"].items()),
        shm_size=table["shm_size"],
        mounts=tuple(mounts),
        compile_cache=table["compile_cache"],
        gpus=table["gpus"],
    )


def compile_caches(kind: str) -> tuple[CompileCache, ...]:
    """An engine kind's compile caches; an unknown kind is an error, not another engine's set."""
    try:
        return COMPILE_CACHES[kind]
    except KeyError:
        raise ValueError(f"no compile caches are known for engine kind {kind!r}") from None


def compile_cache_mounts(kind: str) -> tuple[tuple[str, str], ...]:
    """(host, container) pairs of the compile caches for an engine kind; the host side starts with `$HOME`."""
    return tuple((f"{COMPILE_CACHE_ROOT}/{kind}/{c.name}", c.container) for c in compile_caches(kind))


def compile_cache_env(kind: str) -> dict[str, str]:
    """{variable: container path} that points an engine kind at its mounted caches."""
    return {c.env: c.container for c in compile_caches(kind) if c.env}
