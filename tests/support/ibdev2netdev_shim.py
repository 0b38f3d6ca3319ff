# A stand-in for Mellanox's `ibdev2netdev` on the fake nodes (tests/support/nodes.py installs it on their PATH),
# printing the real tool's lines, one per RDMA device port: "<device> port <n> ==> <netdev> (Up|Down)". By default
# a node shows what a DGX Spark's ConnectX-7 port shows: its two RoCE twins. A test changes that by writing
# $LABKIT_SHIM_STATE/<node>/ibdev2netdev.txt (the exact output; empty: no RDMA device at all).
import os
import sys
from pathlib import Path

SPARK = "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\nroceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)\n"


def main() -> int:
    node = os.environ.get("LABKIT_TEST_NODE", "local")
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "ibdev2netdev.txt"
    sys.stdout.write(f.read_text() if f.exists() else SPARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
