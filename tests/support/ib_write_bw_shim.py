# A stand-in for perftest's `ib_write_bw` on the fake nodes (tests/support/nodes.py installs it on their PATH),
# printing the real tool's report with --report_gbits: a banner, the column header and one row of figures. With
# a server address (the last argument) it is the client; without, the server. Each call's argv is appended to
# $LABKIT_SHIM_STATE/<node>/ib_write_bw.jsonl; a test changes the report by writing .../<node>/ib_write_bw.txt.
import json
import os
import sys
from pathlib import Path

REPORT = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : {device}
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      10000           96.52              96.48              0.184016
---------------------------------------------------------------------------------------
"""


def main() -> int:
    node = os.environ.get("LABKIT_TEST_NODE", "local")
    state = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node
    f = state / "ib_write_bw.txt"
    args = sys.argv[1:]
    if state.parent.is_dir():
        state.mkdir(exist_ok=True)
        with open(state / "ib_write_bw.jsonl", "a") as log:
            log.write(json.dumps(args) + "\n")
    device = args[args.index("-d") + 1] if "-d" in args else "?"
    sys.stdout.write(f.read_text() if f.exists() else REPORT.format(device=device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
