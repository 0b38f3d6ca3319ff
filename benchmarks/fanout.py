"""1-node vs 4-node timing for the fan-out targets ("4 nodes take <= 1.5x the time of one"), with the floor
this machine puts under the 4-node time.

The four test "nodes" are sshd processes on one host, so everything a node does (sshd's session, a shell,
python3 starting, a docker shim, an engine booting) runs on the same few CPUs. Work that would overlap on
four machines queues here. To tell labkit's serialisation apart from the machine's, each 4-node run also
records the CPU the whole machine spent while it ran (/proc/stat) and, separately, labkit's own CPU (this
process and the children it waited for, getrusage). The node side's share — everything but labkit — cannot
fit in less wall time than its CPU seconds divided by the CPU count, however parallel the controller is.
The printed "floor" is max(1-node time, that bound). labkit's own CPU is left out of the floor on purpose:
if the controller burned CPU one node after another, the floor would not rise with it and the 4-node time
would show the excess.
"""

from __future__ import annotations

import os
import resource
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


def own_cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of the children it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass(frozen=True)
class Window:
    """One timed run: wall seconds, machine CPU seconds (None without /proc/stat), labkit's own CPU seconds."""

    seconds: float
    machine_cpu: float | None = None
    own_cpu: float = 0.0


class Meter:
    """Start it, then `stop()` gives the Window since the start."""

    def __init__(self) -> None:
        self.busy, self.own, self.t = machine_busy_seconds(), own_cpu_seconds(), time.perf_counter()

    def stop(self) -> Window:
        took, busy, own = time.perf_counter() - self.t, machine_busy_seconds(), own_cpu_seconds()
        machine = busy - self.busy if busy is not None and self.busy is not None else None
        return Window(took, machine, own - self.own)


def metered(fn) -> Window:
    """The Window of one call of fn()."""
    meter = Meter()
    fn()
    return meter.stop()


@dataclass
class FanoutTiming:
    one: list[float]
    four: list[Window]
    cpus: int

    @property
    def m1(self) -> float:
        return statistics.median(self.one)

    @property
    def m4(self) -> float:
        return statistics.median(w.seconds for w in self.four)

    @property
    def ratio(self) -> float:
        return self.m4 / self.m1

    @property
    def own_cpu(self) -> float:
        return statistics.mean(w.own_cpu for w in self.four)

    @property
    def cpu_bound(self) -> float | None:
        """Least wall time the node side's CPU (machine CPU less labkit's own) allows on this machine; mean
        over runs (/proc/stat counts in 10 ms ticks, so single runs are coarse)."""
        if not self.four or any(w.machine_cpu is None for w in self.four):
            return None
        return statistics.mean(max(0.0, w.machine_cpu - w.own_cpu) for w in self.four) / self.cpus

    @property
    def floor_ratio(self) -> float | None:
        """The 4-node/1-node ratio this machine allows: max(1-node time, CPU bound) / 1-node time."""
        return max(self.m1, self.cpu_bound) / self.m1 if self.cpu_bound is not None else None

    def line(self, what: str, target: float | None = 1.5) -> str:
        verdict = (
            ""
            if target is None
            else f"; target <= {target:g}x -> {'OK' if self.ratio <= target else 'MISSED'}"
        )
        text = (
            f"{what}: 1 node {self.m1 * 1000:.1f} ms, 4 nodes {self.m4 * 1000:.1f} ms "
            f"(medians of {len(self.one)}); ratio {self.ratio:.2f}x{verdict}"
        )
        if self.cpu_bound is not None:
            floor = max(self.m1, self.cpu_bound)
            text += (
                f"\n      node-side CPU during a 4-node run {self.cpu_bound * self.cpus * 1000:.0f} ms on "
                f"{self.cpus} CPUs (labkit's own {self.own_cpu * 1000:.0f} ms not counted) -> floor "
                f"{floor * 1000:.1f} ms, i.e. {self.floor_ratio:.2f}x is the least this machine allows; "
                f"4 nodes took {self.m4 / floor:.2f}x that floor"
            )
        return text + f"  [load {os.getloadavg()[0]:.1f}]"


def time_pair(fn, reps: int) -> FanoutTiming:
    """fn(1) and fn(4), interleaved `reps` times so a burst of load from elsewhere hits both sides.

    fn(n) returns the Window it timed, e.g. via `metered` (or a Meter around just the step of interest)."""
    one, four = [], []
    for _ in range(reps):
        one.append(fn(1).seconds)
        four.append(fn(4))
    return FanoutTiming(one, four, os.cpu_count() or 1)
