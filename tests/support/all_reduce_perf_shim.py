# A stand-in for nccl-tests' `all_reduce_perf` on the fake nodes (tests/support/nodes.py installs it on their
# PATH), printing a report in the real tool's layout: the parameters, one row per size, and the closing
# "# Avg bus bandwidth" line in GB/s. A test changes it by writing $LABKIT_SHIM_STATE/<node>/all_reduce_perf.txt.
import os
import sys
from pathlib import Path

REPORT = """# nThread 1 nGpus 1 minBytes 8388608 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float     sum      -1    812.4   10.33   10.33      0    809.1   10.37   10.37      0
  1073741824     268435456     float     sum      -1  50301.2   21.35   21.35      0  50288.7   21.35   21.35      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 21.3456
#
"""


def main() -> int:
    node = os.environ.get("LABKIT_TEST_NODE", "local")
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "all_reduce_perf.txt"
    sys.stdout.write(f.read_text() if f.exists() else REPORT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
