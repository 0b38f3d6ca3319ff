# A stand-in for iputils' `ping` on the fake nodes (tests/support/nodes.py installs it on their PATH), answering in
# the real tool's format for `ping -n -c N [-i S] [-W S] -I SOURCE TARGET` (SOURCE an address or an interface). It
# asks the node's `ip` shim which interface holds SOURCE: a TARGET on that subnet answers (as a peer on the same
# switch or cable does); any other TARGET has no route ("connect: Network is unreachable", exit 2).
# $LABKIT_SHIM_STATE/<node>/ping.json {"silent": ["10.10.0.5"]} makes a target on the subnet not answer (100 %
# packet loss, exit 1), as a peer that is down does.
import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path


def main(args: list[str]) -> int:
    count, iface, target, i = 1, None, None, 0
    while i < len(args):
        a = args[i]
        if a in ("-c", "-i", "-W", "-I"):
            if a == "-c":
                count = int(args[i + 1])
            if a == "-I":
                iface = args[i + 1]
            i += 2
            continue
        if not a.startswith("-"):
            target = a
        i += 1
    if target is None or iface is None:
        print("shim ping: usage: ping -n -c N -I IFACE TARGET", file=sys.stderr)
        return 2
    own = None
    if re.fullmatch(r"[\d.]+", iface):  # -I ADDRESS: the interface that holds it, as ping binds to it
        r = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
        held = [ipaddress.IPv4Interface(a) for a in re.findall(r"inet (\S+)", r.stdout)]
        own = next((a for a in held if str(a.ip) == iface), None)
        if own is None:
            print("ping: bind: Cannot assign requested address", file=sys.stderr)
            return 2
    else:
        r = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", iface], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"ping: SO_BINDTODEVICE {iface}: No such device", file=sys.stderr)
            return 2
        m = re.search(r"inet (\S+)", r.stdout)
        own = ipaddress.IPv4Interface(m.group(1)) if m else None
    if own is None or ipaddress.ip_address(target) not in own.network:
        print("ping: connect: Network is unreachable", file=sys.stderr)
        return 2
    node = os.environ.get("LABKIT_TEST_NODE", "dgx5")
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "ping.json"
    silent = target in (json.loads(f.read_text()).get("silent", []) if f.exists() else [])
    print(f"PING {target} ({target}) from {own.ip} {iface}: 56(84) bytes of data.")
    for seq in range(1, count + 1):
        if not silent:
            print(f"64 bytes from {target}: icmp_seq={seq} ttl=64 time=0.08{seq} ms")
    got = 0 if silent else count
    print(f"\n--- {target} ping statistics ---")
    loss = 100 if silent else 0
    print(f"{count} packets transmitted, {got} received, {loss}% packet loss, time {200 * (count - 1)}ms")
    return 1 if silent else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
