"""1-node vs 4-node timing for the fan-out targets ("4 nodes take <= 1.5x the time of one"), with the floor
this machine puts under the 4-node time.

The four test "nodes" are sshd processes on one host, so everything a node does (sshd's session, a shell,
python3 starting, a docker shim) runs on the same few CPUs. Work that would overlap on four machines queues
here. To tell labkit's serialisation apart from the machine's, each pair of timings also records how much CPU
the whole machine spent (all processes, from /proc/stat) while the 4-node operation ran: four nodes' work
cannot take less wall time than that CPU time divided by the CPU count, however parallel the controller is.
The printed "floor" is max(1-node time, that bound); a 4-node time near the floor means the fan-out is as
parallel as this machine can show.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float | None:
    """CPU seconds all CPUs have spent not idle since boot (user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


@dataclass
class FanoutTiming:
    one: list[float]
    four: list[float]
    busy_four: list[float]  # machine CPU seconds during each 4-node run (empty without /proc/stat)
    cpus: int

    @property
    def m1(self) -> float:
        return statistics.median(self.one)

    @property
    def m4(self) -> float:
        return statistics.median(self.four)

    @property
    def ratio(self) -> float:
        return self.m4 / self.m1

    @property
    def cpu_bound(self) -> float | None:
        """Least wall time the 4-node run's CPU use allows on this machine (mean over runs; /proc/stat counts
        in 10 ms ticks, so single runs are coarse)."""
        return statistics.mean(self.busy_four) / self.cpus if self.busy_four else None

    @property
    def floor_ratio(self) -> float | None:
        """The 4-node/1-node ratio this machine allows: max(1-node time, CPU bound) / 1-node time."""
        return max(self.m1, self.cpu_bound) / self.m1 if self.cpu_bound is not None else None

    def line(self, what: str, target: float | None = 1.5) -> str:
        verdict = "" if target is None else f"; target <= {target:g}x -> {'OK' if self.ratio <= target else 'MISSED'}"
        text = (f"{what}: 1 node {self.m1 * 1000:.1f} ms, 4 nodes {self.m4 * 1000:.1f} ms "
                f"(medians of {len(self.one)}); ratio {self.ratio:.2f}x{verdict}")
        if self.cpu_bound is not None:
            text += (f"\n      machine CPU during a 4-node run {self.cpu_bound * self.cpus * 1000:.0f} ms on "
                     f"{self.cpus} CPUs -> floor {max(self.m1, self.cpu_bound) * 1000:.1f} ms, "
                     f"i.e. {self.floor_ratio:.2f}x is the least this machine allows; "
                     f"4 nodes took {self.m4 / max(self.m1, self.cpu_bound):.2f}x that floor")
        return text + f"  [load {os.getloadavg()[0]:.1f}]"


def metered(fn) -> tuple[float, float | None]:
    """(wall seconds, machine CPU seconds) of one call of fn()."""
    b0 = machine_busy_seconds()
    t = time.perf_counter()
    fn()
    took = time.perf_counter() - t
    b1 = machine_busy_seconds()
    return took, (b1 - b0 if b0 is not None and b1 is not None else None)


def time_pair(fn, reps: int) -> FanoutTiming:
    """fn(1) and fn(4), interleaved `reps` times so a burst of load from elsewhere hits both sides.

    fn(n) returns (wall seconds, machine CPU seconds or None) of the window it times, e.g. via `metered`."""
    one, four, busy = [], [], []
    for _ in range(reps):
        one.append(fn(1)[0])
        took, cpu = fn(4)
        four.append(took)
        if cpu is not None:
            busy.append(cpu)
    return FanoutTiming(one, four, busy if len(busy) == reps else [], os.cpu_count() or 1)
