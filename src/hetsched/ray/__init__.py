"""hetsched on a Ray cluster: Ray starts the processes, moves the logs and detects dead
nodes; hetsched decides where everything runs.

Modules (Ray itself is imported only when one of them talks to a cluster):
- ``labels``: the node labels and environment variables hetsched reads;
- ``local``: ``LocalCluster``, a throwaway cluster on this machine (``hetsched ray local``);
- ``inventory``: ``RayInventory``, the cluster's nodes as hetsched nodes and events;
- ``probe``: the discovery that runs on each Ray node;
- ``executor``: ``RayExecutor``, bound tasks as Ray actors on the chosen nodes;
- ``runner``: ``TaskRunner``, the actor that runs one task on its node;
- ``testing``: Ray clusters in network and PID namespaces, for tests.
"""

from hetsched.ray.local import LocalCluster, LocalClusterError, LocalNodeSpec, parse_nodes

__all__ = ["LocalCluster", "LocalClusterError", "LocalNodeSpec", "parse_nodes"]
