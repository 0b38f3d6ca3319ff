"""How far from the limit: the bytes a decode step reads and the ceiling they set (docs/roofline.md).

A component of its own beside recipe (it imports only the base): serve, lab and cli read it. In: a checkpoint's
safetensors headers (or their committed digest) and its config.json, the lane's parallelism, speculation and
bandwidth. Out: bytes per decode step by part, per GPU and over the fabric, the decode and prefill ceilings.
Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.roofline.checkpoint import FOLDER, Checkpoint, load_checkpoint
from labkit.roofline.compute import prefill_cost
from labkit.roofline.describe import cases, table
from labkit.roofline.devices import NOMINAL_FABRIC, NOMINAL_MEMORY, Rate, nominal_memory
from labkit.roofline.headers import HeaderDigest, parse_header, read_folder
from labkit.roofline.step import Parallel, StepInputs, ceiling, decode_step

__all__ = [
    "FOLDER",
    "NOMINAL_FABRIC",
    "NOMINAL_MEMORY",
    "Checkpoint",
    "HeaderDigest",
    "Parallel",
    "Rate",
    "StepInputs",
    "cases",
    "ceiling",
    "decode_step",
    "load_checkpoint",
    "nominal_memory",
    "parse_header",
    "prefill_cost",
    "read_folder",
    "table",
]
