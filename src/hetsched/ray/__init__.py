"""hetsched on a Ray cluster: Ray starts the processes, moves the logs and detects dead
nodes; hetsched decides where everything runs.

Modules (Ray itself is imported only when one of them talks to a cluster):
- ``labels``: the node labels and environment variables hetsched reads;
- ``local``: ``LocalCluster``, a throwaway cluster on this machine (``hetsched ray local``);
- ``inventory``: ``RayInventory``, the cluster's nodes as hetsched nodes and events;
- ``probe``: the discovery that runs on each Ray node;
- ``executor``: ``RayExecutor``, bound tasks run by the node agents of the chosen nodes;
- ``agent``: ``NodeAgent``, the actor on each node that runs the local executor there;
- ``link``: the control plane's side of one node agent;
- ``testing``: Ray clusters in network and PID namespaces, for tests.
"""

from hetsched.ray.local import LocalCluster, LocalClusterError, LocalNodeSpec, parse_nodes

__all__ = ["LocalCluster", "LocalClusterError", "LocalNodeSpec", "parse_nodes"]
