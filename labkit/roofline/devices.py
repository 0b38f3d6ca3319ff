"""Nominal memory bandwidth and fabric speed of the devices labkit knows, with their sources: the figure the
roofline uses until a probe measured one (docs/roofline.md, "Bandwidth")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """A bandwidth in bytes/s and where it comes from."""

    bytes_per_s: float
    source: str

    @property
    def gb_s(self) -> float:
        return self.bytes_per_s / 1e9


# GPU memory bandwidth by device name (as a recipe's cluster.device and nvidia-smi's name give it)
NOMINAL_MEMORY = {
    "GB10": Rate(273e9, "nominal: NVIDIA's DGX Spark specification, 273 GB/s LPDDR5X"),
}
# one 200 GbE port (the DGX Spark's ConnectX-7 as the lab cables it), in bytes/s, before any protocol overhead
NOMINAL_FABRIC = Rate(25e9, "nominal: 200 Gb/s Ethernet (RoCE), one port")


def nominal_memory(device: str | None) -> Rate | None:
    """The nominal figure of a device, matched without case ("NVIDIA GB10" matches GB10); None if unknown."""
    if not device:
        return None
    for name, rate in NOMINAL_MEMORY.items():
        if name.lower() in device.lower():
            return rate
    return None
