"""How the nodes are cabled (`[cluster.fabric].topology`) and what that asks of NCCL, as data.

A "switch" fabric puts every node's port on one subnet (a QSFP switch, or two Sparks on one cable): the fabric
interface reaches every node, and labkit's NCCL/GLOO settings are the ones it has always emitted. A switchless
"ring" cables each Spark's two ports to its two neighbours, every cable its own pair of subnets, so a port
reaches only one neighbour: the rendezvous and the sockets go over the management network (`interface` is then
the management port, e.g. enP7s7), RDMA uses every HCA, and NCCL gets the mesh set the Spark launchers use
(docs/cluster-topology.md, "What a ring needs"). Pure: serve's environment builder and `labkit show` read it.
"""

from __future__ import annotations

TOPOLOGIES = ("switch", "ring")
DEFAULT_TOPOLOGY = "switch"

# eugr's spark-vllm-docker (autodiscover.sh, mesh mode) and sparkrun (generate_ring_nccl_overrides) set these
# three for a ring/mesh; docs/cluster-topology.md says what each does.
MESH_ENV = (
    ("NCCL_NET_PLUGIN", "none"),
    ("NCCL_IB_SUBNET_AWARE_ROUTING", "1"),
    ("NCCL_IB_MERGE_NICS", "0"),
)
# eugr's NETWORKING.md ("Closed rings of four or more Sparks"): automatic algorithm selection tried connections
# between non-neighbours and hit QP timeouts in their four-node validation, so a ring of four or more pins Ring.
RING_ALGO_NODES = 4
RING_ALGO = ("NCCL_ALGO", "Ring")


def mesh_env(topology: str, nodes: int) -> dict[str, str]:
    """The NCCL settings a topology adds for a lane of `nodes` nodes ({} for a switch, or a single node, which
    has no peer to route to); the recipe's engine.env still wins over them (labkit.serve.engines.env_tuple)."""
    if topology != "ring" or nodes < 2:
        return {}
    env = dict(MESH_ENV)
    if nodes >= RING_ALGO_NODES:
        env[RING_ALGO[0]] = RING_ALGO[1]
    return env


def ring_advice(interface: str) -> str:
    """What to set when the head's rendezvous address is not reachable from every node on `interface`."""
    return (
        f'if the nodes are cabled as a switchless ring, set [cluster.fabric] topology = "ring" and interface = '
        f'the management port every node shares (e.g. "enP7s7" on a DGX Spark) instead of {interface}'
    )
