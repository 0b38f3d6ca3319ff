"""NFS read accounting: the mountstats parser and the per-node probe read over a host."""

from __future__ import annotations

from labkit.measure.telemetry import io_probe
from labkit.nodes.local import LocalHost

MOUNTSTATS = """device rootfs mounted on / with fstype rootfs
device nas:/export/hf mounted on /mnt/nas with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2
\tage:\t1234
\tbytes:\t1000 0 0 0 258000000 0 0 0
\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)
device tmpfs mounted on /dev/shm with fstype tmpfs
device nas2:/x mounted on /mnt/old with fstype nfs statvers=1.1
\tbytes:\t5 6 7 8 9 10 11 12
"""


def test_parse_mountstats_reads_server_bytes_of_nfs_mounts_only():
    stats = io_probe.parse_mountstats(MOUNTSTATS)
    assert set(stats) == {"/mnt/nas", "/mnt/old"}
    assert stats["/mnt/nas"]["serverreadbytes"] == 258_000_000
    assert stats["/mnt/old"]["directreadbytes"] == 7
    before = {"n1": stats}
    after = {"n1": {"/mnt/nas": {"serverreadbytes": 258_000_500}, "/mnt/old": {"serverreadbytes": 9}}}
    assert io_probe.nfs_read_delta(before, after) == {"n1": 500}


def test_nfs_counters_over_a_host():
    counters = io_probe.nfs_counters([LocalHost("n1")])
    assert set(counters) == {"n1"}
    assert all("serverreadbytes" in c for c in counters["n1"].values())  # {} when no NFS mounts here
    assert io_probe.nfs_read_delta(counters, counters) == {"n1": 0}


def test_node_nfs_probe_samples_over_a_host(tmp_path):
    stats = tmp_path / "mountstats"
    stats.write_text(MOUNTSTATS)

    class FakeProcHost(LocalHost):
        """A real local host whose `cat /proc/self/mountstats` reads a file with NFS mounts in it."""

        def run(self, cmd, timeout=None, stdin=None):
            return super().run(
                ["cat", str(stats)] if list(cmd) == ["cat", "/proc/self/mountstats"] else cmd,
                timeout=timeout,
                stdin=stdin,
            )

    probe = io_probe.NodeNfsProbe(FakeProcHost("dgx7"))
    assert probe.name == "dgx7-nfs"
    sample = probe.sample()
    assert sample["/mnt/nas:serverreadbytes"] == 258_000_000.0
    assert "/dev/shm:serverreadbytes" not in sample
    assert io_probe.NodeNfsProbe(LocalHost("n1")).sample() is not None  # this machine's real file
