"""`labkit doctor --roofline`: the checkpoint's safetensors headers read on the head node (8 bytes and the
header of each file, never a weight) with its config.json, and stored beside the recipe as its checkpoint
facts (`checkpoint/digest.json` and `config.json`, docs/roofline.md), so `labkit show` and every run's
roofline read them without touching a node again."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shlex
from pathlib import Path

from labkit.errors import LabkitError
from labkit.nodes import Host
from labkit.recipe import LanePlan
from labkit.roofline import FOLDER, HeaderDigest, load_checkpoint, parse_header
from labkit.serve.keep import write_whole

HEADERS_TIMEOUT = 600.0  # 48 headers over the NAS: each a seek and a read of a few MB
# stdlib only: for each *.safetensors of the folder, one JSON line with its header text; then config.json
SCRIPT = r"""
import json, os, sys
folder = sys.argv[1]
names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
if not names:
    print(json.dumps({"error": "no *.safetensors files in " + folder})); sys.exit(0)
for name in names:
    with open(os.path.join(folder, name), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= 100 * 2**20:
            print(json.dumps({"file": name, "error": "not a safetensors header (length %d)" % n})); continue
        print(json.dumps({"file": name, "header": f.read(n).decode("utf-8", "replace")}))
try:
    with open(os.path.join(folder, "config.json")) as f:
        print(json.dumps({"config": f.read()}))
except (OSError, ValueError) as e:
    print(json.dumps({"error": "config.json: %s" % e}))
"""


def host_model_path(plan: LanePlan) -> str:
    """Where the checkpoint's files are on the node itself (a docker lane's view is mounted elsewhere)."""
    view = plan.view
    if view is not None:
        return view.dst
    path = plan.model.path or plan.snapshot_path
    if path is None:
        raise LabkitError(
            f"{plan.file}: no model folder on the nodes to read headers from (model.path or cluster.shared_cache)"
        )
    return path


def read_headers(plan: LanePlan, head: Host) -> tuple[HeaderDigest, str]:
    """The header digest and config.json (its text, as the node has it) of the lane's checkpoint, read on
    `head`; LabkitError naming the node and the file when one does not read."""
    folder = host_model_path(plan)
    r = head.run(shlex.join(["python3", "-I", "-S", "-c", SCRIPT, folder]), timeout=HEADERS_TIMEOUT)
    if not r.ok:
        raise LabkitError(
            f"{head.name}: reading the headers in {folder} failed: {(r.stderr.strip() or r.stdout.strip())[-300:]}"
        )
    files, config = {}, ""
    for line in r.stdout.splitlines():
        doc = json.loads(line)
        if "error" in doc:
            raise LabkitError(
                f"{head.name}: {folder}/{doc.get('file', '')}: {doc['error']}".replace("/: ", ": ")
            )
        if "config" in doc:
            config = str(doc["config"])
            try:
                json.loads(config)
            except ValueError as e:
                raise LabkitError(f"{head.name}: {folder}/config.json: not JSON ({e})")
        else:
            files[doc["file"]] = parse_header(doc["header"].encode(), f"{head.name}:{folder}/{doc['file']}")
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return HeaderDigest(files, f"the headers of {folder} on {head.name}, read {when}"), config


def store_headers(plan: LanePlan, digest: HeaderDigest, config: str) -> Path:
    """digest.json and config.json (the node's text, byte for byte) into the recipe's checkpoint/ folder;
    the KV figure a committed digest states (a cache the config cannot describe) is carried over. Returns the
    folder. A recipe whose checkpoint/ links to another's (one checkpoint, two lanes) writes there."""
    folder = Path(plan.file).parent / FOLDER
    before = load_checkpoint(folder) if folder.is_dir() else None
    if before is not None and before.digest.kv_bytes_per_token:
        digest = dataclasses.replace(
            digest, kv_bytes_per_token=before.digest.kv_bytes_per_token, kv_note=before.digest.kv_note
        )
    write_whole(folder / "digest.json", json.dumps(digest.to_json(), indent=1) + "\n")
    write_whole(folder / "config.json", config)
    return folder
