"""`labkit tiny-model`: build (once) a tiny random-weight model and print where it is."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from labkit import tinymodel

    path = tinymodel.ensure(args.preset, log=None if args.quiet else sys.stderr, fmt=args.format)
    print(json.dumps({"path": str(path), **(tinymodel.facts(path) or {})}, indent=2) if args.json else path)
    return 0


def add_tiny_model(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "tiny-model",
        help="build (once) and print the path of a tiny random-weight llama (GGUF file or HF directory)",
    )
    p.add_argument(
        "preset",
        nargs="?",
        default="tiny-llama",
        help="tiny-llama (default), tiny-llama-small or tiny-llama-eos",
    )
    p.add_argument(
        "--format",
        choices=("gguf", "hf"),
        default="gguf",
        help="gguf: one file for llama.cpp (default); hf: a model directory for vLLM and SGLang",
    )
    p.add_argument("--json", action="store_true", help="print the build facts (spec, versions, sha256)")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_tiny_model)
