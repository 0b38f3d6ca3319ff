# A stand-in for iproute2's `ip` on the fake nodes (tests/support/nodes.py installs it on their PATH), answering
# in the real tool's one-line (-o) format. Each node has "lo" with its own loopback address (127.0.0.2 for dgx5,
# ...) and "cx7", a fabric port 10.10.0.<5..8>/24, state UP. A test changes a node's interfaces by writing
# $LABKIT_SHIM_STATE/<node>/ip.json: {"cx7": {"address": "10.10.0.9/24", "state": "DOWN"}, "lo": null}
# (null: the device does not exist; "address": null: up without an IPv4 address). States as `ip -o link` shows
# them: "UP"; "DOWN" (set down: flags <BROADCAST,MULTICAST>); "NO-CARRIER" (up but no link: state DOWN, flags
# <NO-CARRIER,BROADCAST,MULTICAST,UP>). As on Linux, a down interface keeps its IPv4 address in `ip addr`.
# "mtu" sets a device's MTU (9000 unless given); `ip -o -4 addr show` without `dev` lists every device's address,
# so a test can add a second interface, e.g. {"enP2p1s0f1np1": {"address": "10.10.0.15/24", "state": "UP"}}.
import json
import os
import sys
from pathlib import Path

NODES = {"dgx5": 2, "dgx6": 3, "dgx7": 4, "dgx8": 5}


def interfaces() -> dict:
    node = os.environ.get("LABKIT_TEST_NODE", "dgx5")
    n = NODES.get(node, 2)
    out = {
        "lo": {"index": 1, "address": f"127.0.0.{n}/8", "state": "UNKNOWN"},
        "cx7": {"index": 3, "address": f"10.10.0.{n + 3}/24", "state": "UP"},
    }
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "ip.json"
    if f.exists():
        for name, value in json.loads(f.read_text()).items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = {"index": out.get(name, {}).get("index", 7), **out.get(name, {}), **value}
    return out


def addr_line(name: str, dev: dict) -> str:
    scope = "host" if name == "lo" else "global"
    return f"{dev['index']}: {name}    inet {dev['address']} scope {scope} {name}\\       valid_lft forever preferred_lft forever"


def main(args: list[str]) -> int:
    words = [a for a in args if a not in ("-o", "-4", "-br")]
    if words in (["addr", "show"], ["address", "show"], ["addr"]):
        for name, dev in sorted(interfaces().items(), key=lambda kv: kv[1]["index"]):
            if dev.get("address"):
                print(addr_line(name, dev))
        return 0
    if len(words) < 4 or words[-2] != "dev" or words[0] not in ("addr", "address", "link"):
        print(f"shim ip: unsupported: ip {' '.join(args)}", file=sys.stderr)
        return 2
    name = words[-1]
    dev = interfaces().get(name)
    if dev is None:
        print(f'Device "{name}" does not exist.', file=sys.stderr)
        return 1
    i = dev["index"]
    if words[0] == "link":
        state = dev["state"]
        flags = {
            "DOWN": "<BROADCAST,MULTICAST>",
            "NO-CARRIER": "<NO-CARRIER,BROADCAST,MULTICAST,UP>",
        }.get(state, "<LOOPBACK,UP,LOWER_UP>" if name == "lo" else "<BROADCAST,MULTICAST,UP,LOWER_UP>")
        state = "DOWN" if state == "NO-CARRIER" else state
        print(
            f"{i}: {name}: {flags} mtu {dev.get('mtu', 9000)} qdisc mq state {state} mode DEFAULT group default qlen 1000\\"
            "    link/ether 4c:bb:47:2c:1a:0e brd ff:ff:ff:ff:ff:ff"
        )
        return 0
    if dev.get("address"):
        print(addr_line(name, dev))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
