"""The Ray task executor on a real local Ray cluster (in its own namespaces): placement,
devices, a task on each of two nodes at once, exit codes and logs, stops with a grace, a
raylet killed under a task, and a control plane SIGKILLed and replaced."""

from __future__ import annotations

import json
from pathlib import Path

from ray_fixtures import check

from hetsched.agent import executor as agent_executor
from hetsched.ray import handle as ray_handle
from hetsched.ray.testing import NamespacedCluster


def test_tasks_run_on_the_chosen_node_with_the_chosen_devices(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:placement", timeout_s=120))
    assert isinstance(value, dict)
    assert value["exits"] == [
        ["job-a", 0, 1, 0, False, "exit code 0"],
        ["job-c", 0, 1, 0, False, "exit code 0"],
        ["job-t", 0, 1, 0, False, "exit code 0"],
    ]
    seen, views, ids = value["seen"], value["views"], value["node_ids"]
    # Ray's own view: each task's node agent on the node hetsched chose, with no resource
    # and no GPU, and the task its child (the process table: the agent's worker is the parent
    # of the task's wrapper), with no actor of its own
    assert views["job-a/0#1"]["node_id"] == ids["a100-0"]
    assert views["job-t/0#1"]["node_id"] == ids["t4-0"]
    assert views["job-c/0#1"]["node_id"] == ids["cpu-0"]
    for key, view in views.items():
        assert view["assigned"] == {} and view["gpu_ids"] == []
        assert key in view["tasks"]
        assert seen[key.split("/")[0]]["gppid"] == view["worker_pid"]
    # one agent per node used, named by its Ray node id: no actor per task
    assert value["actors"] == sorted("agent-" + ids[n] for n in value["used"])
    # the task's own view: the devices hetsched chose, as the local executor sets them
    a, t, c = seen["job-a"]["env"], seen["job-t"]["env"], seen["job-c"]["env"]
    assert (a["HETSCHED_NODE"], a["CUDA_VISIBLE_DEVICES"], a["MINE"]) == ("a100-0", "1", "1")
    assert json.loads(a["HETSCHED_DEVICES"]) == [
        {
            "id": "a100-0/gpu1",
            "class": "gpu",
            "vendor": "nvidia",
            "model": "A100",
            "index": 1,
            "share": 1000,
        }
    ]
    assert (t["HETSCHED_NODE"], t["CUDA_VISIBLE_DEVICES"]) == ("t4-0", "0")
    assert json.loads(t["HETSCHED_DEVICES"])[0]["share"] == 500
    assert (c["HETSCHED_NODE"], c["CUDA_VISIBLE_DEVICES"], c["HETSCHED_DEVICES"]) == (
        "cpu-0",
        "",
        "[]",
    )
    assert a["ROCR_VISIBLE_DEVICES"] == a["HIP_VISIBLE_DEVICES"] == ""
    assert (a["HETSCHED_JOB_ID"], a["HETSCHED_TASK_KEY"], a["HETSCHED_INSTANCE"]) == (
        "job-a",
        "job-a/0#1",
        "placement",
    )
    # the node's own HETSCHED_* (the fake device file) is not passed on
    assert "HETSCHED_FAKE_DEVICES" not in a
    for task in seen.values():
        # its own process group and session, under the supervisor
        assert task["pgid"] == task["sid"] == task["ppid"] != task["pid"]
    assert value["headers"]["job-t"] == "--- hetsched: run 1 of task 0 on t4-0 ---"
    # the tasks' files on the nodes went once their exits were acknowledged
    assert value["node_files_left"] == []


def test_a_job_across_two_ray_nodes_runs_at_once(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:gang", timeout_s=150))
    assert isinstance(value, dict)
    # each task waited for the other's mark: both ran at the same time
    assert value["exits"] == [
        ["gang", 0, 1, 0, False, "exit code 0"],
        ["gang", 1, 1, 0, False, "exit code 0"],
    ]
    assert value["lines"] == ["a100-0 0,1", "t4-0 0"]


def test_exit_codes_logs_and_runtime_limits(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:exits_and_logs", timeout_s=150))
    assert isinstance(value, dict)
    exits = value["exits"]
    assert exits["codes"][3:] == [4, False, "exit code 4"]
    assert exits["missing"][3:] == [127, False, "exit code 127"]
    assert exits["signalled"][3:] == [137, False, "exit code 137 (signal 9)"]
    assert exits["slow"][4:] == [False, "exceeded its maximum runtime"]
    assert value["out"] == "--- hetsched: run 1 of task 0 on cpu-0 ---\nout\n"
    assert value["err"] == "err\n"
    assert "/no/such/program" in value["missing_err"]
    assert value["missing_err"].endswith("not found\n")
    assert value["mode"] == "0o600"
    assert value["unknown"] == "node nowhere is not in the Ray cluster"


def test_a_hard_link_planted_as_a_task_log_is_replaced_never_written_through(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:planted_logs", timeout_s=150))
    assert isinstance(value, dict)
    assert value["exits"] == [
        ["before", 0, 1, 0, False, "exit code 0"],
        ["during", 0, 1, 0, False, "exit code 0"],
    ]
    assert value["victims"] == {"before": "untouched\n", "during": "untouched\n"}
    assert value["links"] == {"before": 1, "during": 1}
    assert value["logs"]["before"] == "--- hetsched: run 1 of task 0 on cpu-0 ---\nwritten\n"
    # the task's own link replaced the log: what came after it is there, the victim untouched
    assert value["logs"]["during"].endswith("written\n")


def test_the_ray_executor_opens_logs_with_the_local_executors_opener() -> None:
    # one opener for both: a guard added to it reaches Ray tasks' logs too
    assert ray_handle.open_task_log is agent_executor.open_task_log


def test_stop_with_grace_then_kill_reaching_the_whole_group(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:stops", timeout_s=150))
    assert isinstance(value, dict)
    exits = value["exits"]
    # a plain task ends on SIGTERM; a graceful one keeps its own status; a stubborn one
    # (and its grandchild) is killed after its grace
    assert exits["plain"][3:] == [143, True, "exit code 143 (signal 15)"]
    assert exits["graceful"][3:] == [0, True, "exit code 0"]
    assert exits["stubborn"][3:] == [-9, True, "killed by signal 9"]
    assert value["graceful_out"].endswith("bye\n")
    assert len(value["family"]["stubborn/0#1"]) >= 3
    assert value["left"] == {key: [] for key in value["family"]}


def test_a_raylet_killed_under_a_task_makes_it_lost(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_executor:node_dies", timeout_s=240))
    assert isinstance(value, dict)
    [lost] = value["lost"]
    assert lost[:5] == ["doomed", 0, 1, None, False]
    assert lost[5].startswith("lost: node h100-0 died")
    # the task did not outlive its actor, and the task on another node ran on
    assert value["task_alive_after"] is False
    assert value["still_running"] == ["safe/0#1"]
    assert value["safe"][0][3:5] == [143, True]


def test_a_new_control_plane_adopts_running_tasks_and_reports_each_exit_once(
    ray_cluster: NamespacedCluster, tmp_path: Path
) -> None:
    state = {"state": str(tmp_path)}
    died = ray_cluster.run("ray_bodies_executor:start_and_die", state, timeout_s=120)
    assert died.rc == -9, died.output
    value = check(ray_cluster.run("ray_bodies_executor:adopt_after_crash", state, timeout_s=180))
    assert isinstance(value, dict)
    keys = value["keys"]
    assert value["reported_before"] == [["reported", 0, 1, 7, False, "exit code 7"]]
    # every task is found again; the live ones are adopted with the same processes
    assert value["leaders"] == sorted(keys.values())
    assert value["adopted"] == {
        keys[name]: value["pids_before"][name] for name in ("ends", "runs", "talks")
    }
    # the one whose exit was recorded before the crash is swept, not reported again
    assert value["swept"] == [keys["reported"]]
    assert value["exits"] == [
        ["ends", 0, 1, 5, False, "exit code 5"],
        ["runs", 0, 1, 143, True, "exit code 143 (signal 15)"],
        ["talks", 0, 1, 0, False, "exit code 0"],
    ]
    assert value["extra"] == []
    # the output streamed before and after the crash: every line once, in order
    lines = value["talks"].splitlines()
    assert lines == ["--- hetsched: run 1 of task 0 on cpu-0 ---"] + [
        f"line {i}" for i in range(1, 41)
    ]
    assert value["names_left"] == []


def test_a_burst_of_a_thousand_tasks_reports_each_exit_once(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_agent:burst", {"jobs": 1000}, timeout_s=300))
    assert isinstance(value, dict)
    # the burst, then one task on each node once the cluster is idle again
    assert value["codes"] == {"0": 1003}
    assert (value["reported"], value["repeated"]) == (1003, [])
    assert value["node_files_left"] == 0


def test_an_agent_killed_on_a_live_node_is_recreated_and_its_tasks_end_once(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_agent:agent_dies", timeout_s=240))
    assert isinstance(value, dict)
    assert value["recreated"] is True
    by_job = {e[0]: e for e in value["exits"]}
    assert sorted(by_job) == ["again", "long", "short"] and len(value["exits"]) == 3
    # each task reported once: adopted (its own status; "long" stopped then), reported lost
    # by the new agent (no status), or killed with the old agent (Ray SIGKILLs a dying
    # worker's children, the tasks' wrappers, and the old agent may still report that)
    short, long = by_job["short"], by_job["long"]
    killed = [-9, False, "killed by signal 9"]
    assert short[3:5] == [3, False] or _lost(short) or short[3:] == killed, short
    assert long[3:5] == [143, True] or _lost(long) or long[3:] == killed, long
    assert by_job["again"][3:] == [0, False, "exit code 0"]
    assert value["extra"] == [] and value["left"] == []


def test_a_stop_with_a_notice_signals_the_task_first_on_its_node(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_agent:notice", timeout_s=180))
    assert isinstance(value, dict)
    assert value["in_notice"] == [True, True]
    # the one that saved in its notice ends with its own status; the one that ignored the
    # notice signal gets SIGTERM when the notice is over
    assert value["exits"] == [
        ["deaf", 0, 1, 143, True, "exit code 143 (signal 15)"],
        ["told", 0, 1, 0, True, "exit code 0"],
    ]
    assert value["told_out"] == "saved"


def _lost(exit_: list[object]) -> bool:
    return exit_[3] is None and str(exit_[5]).startswith("lost: it ended while the agent")
