"""`labkit doctor --bandwidth`, the pure part: the commands of the tools the Spark launchers measure the fabric
with (perftest's `ib_write_bw` between two nodes, nccl-tests' `all_reduce_perf` over the lane) and parsers of
the lines they print, as one `Measured` per pair and tool. A tool missing on a node is a result that says so,
not an error. docs/bandwidth.md, "What is measured", "The lines read" and "Absent tools, and tools in the
image".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from labkit.errors import LabkitError

IB_WRITE_BW = "ib_write_bw"
ALL_REDUCE = "all_reduce_perf"
MPIRUN = "mpirun"
TOOLS = (IB_WRITE_BW, ALL_REDUCE, MPIRUN)
SECONDS = 5  # ib_write_bw -D: how long each direction is measured
ABSENT = "absent"
NODE, IMAGE = "node", "image"  # where a tool runs: on the node's own PATH, or in the lane's docker image
IMAGE_MARK = "@@image"

# ib_write_bw --report_gbits: a header naming the columns, then one row of numbers
IB_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[Gb/sec\]\s+BW average\[Gb/sec\]", re.M)
IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")
AVG_BUS = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)\s*$", re.M)


@dataclass(frozen=True)
class Measured:
    """One tool's figure over one pair ("dgx5-dgx6", or the lane's nodes joined for all_reduce_perf); `figure` is
    None when the tool did not give one, and `line` then says why (absent on a node, failed, garbled)."""

    pair: str
    tool: str
    figure: float | None
    unit: str
    line: str
    where: str = ""  # "node", "image", or both joined; "" when it did not run

    def to_dict(self) -> dict:
        return {
            "pair": self.pair,
            "tool": self.tool,
            "figure": self.figure,
            "unit": self.unit,
            "line": self.line,
            "where": self.where,
        }


def which_command(image_prefix: list[str] | None = None) -> str:
    """Prints `<tool> <path>` for each tool on the node's PATH; with `image_prefix` (a docker lane's
    `docker run --rm ... IMAGE`), then a mark line and the same for the image's PATH."""
    which = (
        "; ".join(f'p=$(command -v {shlex.quote(t)}) && echo {shlex.quote(t)} "$p"' for t in TOOLS) + "; true"
    )
    if image_prefix is None:
        return which
    in_image = quoted([*image_prefix, "sh", "-c", which])
    return f"{which}; echo {IMAGE_MARK}; {in_image} 2>/dev/null; true"


def parse_which(stdout: str) -> dict[str, str]:
    """{tool: NODE or IMAGE} for the tools `which_command` found; the node's own copy wins."""
    found: dict[str, str] = {}
    place = NODE
    for line in stdout.splitlines():
        words = line.split()
        if words == [IMAGE_MARK]:
            place = IMAGE
        elif words and words[0] in TOOLS:
            found.setdefault(words[0], place)
    return found


def ib_server_argv(hca: str, seconds: int = SECONDS) -> list[str]:
    return [IB_WRITE_BW, "-d", hca, "-F", "--report_gbits", "-D", str(seconds)]


def ib_server_command(hca: str, seconds: int = SECONDS, limit: int = 40, prefix: tuple[str, ...] = ()) -> str:
    """The server, ended by coreutils' timeout after `limit` seconds should no client ever connect (inside the
    container when `prefix` runs it in the image, so no container outlives it)."""
    return quoted([*prefix, "timeout", str(int(limit)), *ib_server_argv(hca, seconds)])


def ib_client_argv(hca: str, server_address: str, seconds: int = SECONDS) -> list[str]:
    return [*ib_server_argv(hca, seconds), server_address]


def quoted(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def ib_client_command(
    hca: str, server_address: str, seconds: int = SECONDS, tries: int = 10, prefix: tuple[str, ...] = ()
) -> str:
    """The client, retried once a second until the server on the other node listens (it starts at the same time)."""
    client = quoted([*prefix, *ib_client_argv(hca, server_address, seconds)])
    return f"for i in $(seq {int(tries)}); do {client} && exit 0; sleep 1; done; exit 1"


def all_reduce_argv(
    hosts: list[str], mpirun: bool, env: dict[str, str] | None = None, interface: str | None = None
) -> list[str]:
    """all_reduce_perf from 8 MB to 1 GB, one GPU per process. Under mpirun: one slot per node (`-H addr:1`),
    Open MPI's own TCP traffic on the fabric interface, and the lane's fabric env passed to every rank with
    `-x`, so NCCL runs as the engine's would (docs/bandwidth.md, "What is measured")."""
    test = [ALL_REDUCE, "-b", "8M", "-e", "1G", "-f", "2", "-g", "1"]
    if not mpirun:
        return test
    argv = [MPIRUN, "-np", str(len(hosts)), "-H", ",".join(f"{h}:1" for h in hosts)]
    if interface:
        argv += ["--mca", "btl_tcp_if_include", interface, "--mca", "oob_tcp_if_include", interface]
    for key, value in (env or {}).items():
        argv += ["-x", f"{key}={value}"]
    return [*argv, *test]


def parse_ib_write_bw(stdout: str) -> tuple[float, str]:
    """(average Gb/s, the row read) from ib_write_bw's table; LabkitError saying what was missing."""
    header = IB_HEADER.search(stdout)
    if header is None:
        raise LabkitError("ib_write_bw output has no '#bytes #iterations BW peak[Gb/sec] ...' header line")
    for line in stdout[header.end() :].splitlines()[1:]:
        if not line.strip() or line.lstrip().startswith("-"):
            continue
        m = IB_ROW.match(line)
        if m is None:
            raise LabkitError(f"ib_write_bw row under the header is not 5 numbers: {line.strip()!r}")
        return float(m.group(4)), line.strip()
    raise LabkitError("ib_write_bw output has a header but no row of figures under it")


def parse_all_reduce(stdout: str) -> tuple[float, str]:
    """(average bus bandwidth GB/s, the line read) from all_reduce_perf's report."""
    m = AVG_BUS.search(stdout)
    if m is None:
        raise LabkitError("all_reduce_perf output has no '# Avg bus bandwidth : <GB/s>' line")
    return float(m.group(1)), m.group(0).strip()


def absent(pair: str, tool: str, nodes: list[str], image: str | None = None) -> Measured:
    where = f"the PATH of {', '.join(nodes)}" + (f" or in {image}" if image else "")
    return Measured(pair, tool, None, "", f"{ABSENT}: {tool} is not on {where}")


def measured(pair: str, tool: str, ok: bool, stdout: str, stderr: str = "", where: str = "") -> Measured:
    """The tool's figure, or why there is none (its own error's last line, or what the parser missed)."""
    unit = "Gb/s" if tool == IB_WRITE_BW else "GB/s"
    parse = parse_ib_write_bw if tool == IB_WRITE_BW else parse_all_reduce
    if not ok:
        last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        return Measured(pair, tool, None, unit, f"failed: {last}", where)
    try:
        figure, line = parse(stdout)
    except LabkitError as e:
        return Measured(pair, tool, None, unit, f"unreadable: {e}", where)
    return Measured(pair, tool, figure, unit, line, where)
