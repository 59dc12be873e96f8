"""A Ray cluster of several nodes on this machine, held by its own process for the tests.

``python ray_cluster.py`` starts a head and one more node (``ray.cluster_utils.Cluster``,
one CPU each), prints one JSON line (the address and node ids), then answers one JSON
command per line on stdin: ``{"add": {...add_node arguments...}}`` (replies the new
node's id), ``{"remove": NODE_ID}``, ``{"nodes": true}``. At end of input it shuts the
cluster down. Ray keeps per-process state (threads, descriptors, a cluster's children),
so the test process itself never imports Ray's cluster code.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MB = 1024 * 1024


def main() -> None:
    # This file's folder must not shadow anything: it holds no module named like Ray's.
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 80 * MB, "include_dashboard": False,
        "resources": {"head": 100}})
    nodes: dict[str, Any] = {cluster.head_node.node_id: cluster.head_node}
    second = cluster.add_node(num_cpus=1, object_store_memory=80 * MB)
    nodes[second.node_id] = second
    cluster.wait_for_nodes()

    def reply(value: object) -> None:
        print(json.dumps(value), flush=True)

    reply({"address": cluster.address, "nodes": sorted(nodes)})
    try:
        for line in sys.stdin:
            command = json.loads(line)
            if "add" in command:
                node = cluster.add_node(object_store_memory=80 * MB, **command["add"])
                cluster.wait_for_nodes()
                nodes[node.node_id] = node
                reply(node.node_id)
            elif "remove" in command:
                cluster.remove_node(nodes.pop(command["remove"]))
                reply(None)
            else:
                reply(sorted(nodes))
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
