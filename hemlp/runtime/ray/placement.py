"""Where each task of a wave runs: next to the bytes of its arguments, the wave's tasks balanced over the nodes.

RayProgram submits a whole program at once, so most of a task's arguments do not exist yet when it is submitted.
What places it is the node each argument will be on: the driver's node for what the driver put (the input blocks,
the weights), the node the producing task was sent to for a task's returns. A task goes, by Ray's
``NodeAffinitySchedulingStrategy(node, soft=True)``, to the node that holds the most bytes of its arguments among
the nodes with room left in its wave: a wave of n tasks gives a node at most ceil(n x its share of the wave's CPU
slots), so a wave whose inputs all lie on one node (the driver's input) still spreads, and a wave whose blocks are
spread keeps each block where it is (only the rows a task lacks move). soft=True: a task whose node has died runs
elsewhere, and Ray re-makes lost arguments from their lineage; the hint for its own returns is then wrong, which
costs bytes, never bits. On a one-node cluster nothing is placed (Ray's default).
"""
from __future__ import annotations

__all__ = ["Placement", "live_cpus", "split_nodes"]


def live_cpus(ray) -> dict:
    """{node id: CPUs} of the connected cluster's live nodes with at least one CPU: the nodes tasks are placed on."""
    return {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1}


def split_nodes(cpus: dict, num_workers: int) -> int:
    """K, the nodes a run splits over: the nodes of `cpus` (live_cpus), no more than the workers asked for
    (num_workers=1 is one task wherever it runs); 1 on a one-node cluster."""
    return min(len(cpus), int(num_workers)) if len(cpus) > 1 else 1


class Placement:
    """The node of every task RayProgram submits in one run (use inside ray_session: it reads the live nodes once).

    wave(tasks, cpus) opens a wave; node(args) names the node for one of its tasks from (ObjectRef, bytes) pairs;
    options(node) are its Ray options; produced(refs, node) records where its returns will be; put(ref) records an
    object the driver put. Objects are known by their ids, so placement keeps no object alive."""

    def __init__(self, ray):
        self.ray = ray
        self.cpus = live_cpus(ray)
        self.here = ray.get_runtime_context().get_node_id()   # the driver's node: what it puts lives there
        self.where: dict = {}      # object id (hex) -> the node it is (or will be) on
        self.count: dict = {}      # node -> tasks of the open wave sent there
        self.room: dict = {}       # node -> tasks of the open wave it may take

    @property
    def active(self) -> bool:
        """Whether tasks are placed: only a cluster of several nodes has a choice."""
        return len(self.cpus) > 1

    def wave(self, tasks: int, cpus: int = 1) -> None:
        """Open a wave of `tasks` tasks holding `cpus` CPUs each: every node's room is its share of the CPU slots."""
        slots = {n: int(c // max(1, cpus)) for n, c in self.cpus.items()}
        total = sum(slots.values()) or 1
        self.room = {n: -(-max(1, int(tasks)) * s // total) for n, s in slots.items() if s > 0}
        self.count = dict.fromkeys(self.room, 0)

    def node(self, args) -> str | None:
        """The node for a task with these (ObjectRef, bytes) arguments: the one holding most of the bytes among
        those with room in the wave (a tie: the least loaded, then the first by id). None when nothing is placed."""
        if not self.active or not self.room:
            return None
        local = dict.fromkeys(self.room, 0)
        for ref, nbytes in args:
            n = self.where.get(ref.hex())
            if n in local:
                local[n] += int(nbytes)
        free = [n for n in sorted(self.room) if self.count[n] < self.room[n]] or sorted(self.room)
        best = min(free, key=lambda n: (-local[n], self.count[n] / self.room[n]))
        self.count[best] += 1
        return best

    def options(self, node: str | None) -> dict:
        """Ray task options that send a task to `node` (soft: elsewhere if it died); none when node is None."""
        if node is None:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return dict(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True))

    def produced(self, refs, node: str | None) -> None:
        """The returns of a task sent to `node` will be in that node's store."""
        if node is not None:
            for r in refs:
                self.where[r.hex()] = node

    def put(self, ref) -> None:
        """An object the driver put: it is in the driver's node's store."""
        self.where[ref.hex()] = self.here

    def planned(self, ref) -> str | None:
        """The node a task's return (or a put) was planned on (None: not placed)."""
        return self.where.get(ref.hex())
