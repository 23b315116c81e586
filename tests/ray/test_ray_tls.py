"""`hetsched up --executor ray` over https: a task on a Ray node is told the https
``--advertise-url`` and the CA (as PEM text: nothing is copied to the node) and reports a
checkpoint through the API; the control plane verifies nothing of the task but its token.
"""

from __future__ import annotations

from ray_fixtures import check

from hetsched.ray.testing import NamespacedCluster


def test_a_task_on_a_ray_node_reports_over_https(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_tls:checkpoint_over_https", timeout_s=300))
    assert isinstance(value, dict)
    job, log, url = value["job"], value["log"], value["url"]
    assert job["state"] == "succeeded", (job, log)
    assert f"api={url} " in log and "pem=yes" in log
    assert "checkpoint reported: step 5, /saved/5" in log
    assert job["checkpoint"]["step"] == 5
    (task,) = job["tasks"]
    assert f"node={task['node']}" in log
