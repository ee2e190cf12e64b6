"""What the connected Ray cluster is made of: its live nodes, their memory and CPUs (compile's nodes='auto' /
node_memory='auto').

Nothing here starts or joins a cluster: planning reads the cluster the process is already connected to, if any.
"""
from __future__ import annotations

import sys

__all__ = ["connected_nodes"]


def connected_nodes() -> list[dict] | None:
    """The live nodes of the Ray cluster this process is connected to, sorted by node id: dicts of node_id,
    address, memory (the node's 'memory' resource: what `ray start --memory` declares, else Ray's share of the
    machine's memory), cpus and store (object store bytes). None when Ray is not imported or not initialised."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        out.append(dict(node_id=n["NodeID"], address=n.get("NodeManagerAddress"), memory=int(res.get("memory", 0)),
                        cpus=float(res.get("CPU", 0)), store=int(res.get("object_store_memory", 0))))
    return sorted(out, key=lambda d: d["node_id"])

