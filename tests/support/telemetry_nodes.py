"""Helpers for the node-telemetry tests on the four sshd nodes (tests/support/nodes.py): what each node's
nvidia-smi shim reports (tests/support/nvidia_smi_shim.py), a cluster whose nvidia-smi is missing, and the
sampler processes still alive on the nodes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from labkit.nodes.group import host_for
from labkit.nodes.ssh import SshHost
from tests.support.nodes import NODE_NAMES, Cluster

GB10_DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def ssh_hosts(cluster: Cluster) -> list[SshHost]:
    """One SshHost per node, named by its address (the telemetry's node names)."""
    return [host_for(a, None, cluster.port, 5, cluster.ssh_options()) for a in cluster.addresses]


def set_gpu(cluster: Cluster, addr: str, **state) -> None:
    """The node's nvidia-smi state (keys of tests/support/nvidia_smi_shim.py: series, gpus, fail, reject)."""
    d = cluster.shim_state / NODE_NAMES[addr]
    d.mkdir(parents=True, exist_ok=True)
    (d / "nvidia-smi.json").write_text(json.dumps(state))


def gpu_row(power: float, sm: int, temp: int = 55, util: int = 90, reasons: int = 0) -> dict:
    """Field overrides for one loop iteration, as the real tool prints the values with units."""
    return {
        "power.draw": f"{power:.2f} W",
        "clocks.sm": f"{sm} MHz",
        "temperature.gpu": str(temp),
        "utilization.gpu": f"{util} %",
        "clocks_event_reasons.active": f"0x{reasons:016x}",
    }


@contextlib.contextmanager
def without_nvidia_smi(cluster: Cluster) -> Iterator[None]:
    """No nvidia-smi on any node's PATH inside the block (the shim folder is shared by all four)."""
    shim = cluster.shim_dir / "nvidia-smi"
    aside = cluster.shim_dir.parent / "nvidia-smi.aside"
    shim.rename(aside)
    try:
        yield
    finally:
        aside.rename(shim)


def sampler_processes(cluster: Cluster) -> list[tuple[int, str]]:
    """Live processes on the nodes that belong to a telemetry sampler: its script or nvidia-smi in loop mode."""
    return [
        (pid, cmd)
        for pid, cmd in cluster.processes()
        if "labkit-telemetry-" in cmd or ("nvidia-smi" in cmd and "-lms" in cmd)
    ]
