"""``hetsched up`` with a cluster file that declares network levels: a job submitted with
``topology: {required: ...}`` through the API runs inside one domain, real processes and
real HTTP (the job spec JSON the store keeps carries the request)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from service_fixtures import Api, service_options, serving
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.service.testing import running

RACK = "network.hetsched.io/rack"
#: r1: n0, n1; r2: n2, n3, n4 (2 GPUs each); best fit alone would start on n0
CLUSTER = f"""
topology:
  levels: [{RACK}]
nodes:
  - name: n{{i}}
    replicas: 2
    cpu: "8"
    memory: 16Gi
    labels: {{{RACK}: r1}}
    devices: [{{class: gpu, vendor: nvidia, model: A100, count: 2}}]
  - name: m{{i}}
    replicas: 3
    cpu: "8"
    memory: 16Gi
    labels: {{{RACK}: r2}}
    devices: [{{class: gpu, vendor: nvidia, model: A100, count: 2}}]
"""


def test_a_job_that_requires_a_rack_runs_inside_one(tmp_path: Path) -> None:
    cluster = tmp_path / "racks.yaml"
    cluster.write_text(CLUSTER)
    with running(service_options(tmp_path, cluster=[cluster])) as svc:
        api = Api(svc)
        try:
            body = {
                "name": "ring",
                "replicas": 3,
                "resources": {
                    "cpu": "1",
                    "memory": "256Mi",
                    "devices": [{"class": "gpu", "count": 2}],
                },
                "topology": {"required": RACK},
                "command": [sys.executable, "-c", "pass"],
            }
            answer = api.alice.post("/v1/jobs", json=body)
            assert answer.status_code in (200, 201), answer.text
            job_id = answer.json()["id"]
            job = api.wait(api.alice, job_id, {"succeeded", "failed"}, 60)
            assert job["state"] == "succeeded", job
            assert sorted(t["node"] for t in job["tasks"]) == ["m0", "m1", "m2"]
            detail = api.alice.get(f"/v1/jobs/{job_id}").json()
            assert [t["domains"] for t in detail["tasks"]] == [{RACK: "r2"}] * 3
            env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"]}
            shown = CliRunner().invoke(app, ["job", job_id], env=env)
            assert shown.exit_code == 0, shown.output
            assert f"{'domains':>10}  r2: 3 tasks\n" in shown.stdout, shown.stdout
            domains = {n["name"]: n.get("domains") for n in api.alice.get("/v1/nodes").json()}
            assert domains["m0"] == {RACK: "r2"} and domains["n1"] == {RACK: "r1"}
            assert domains["local"] == {RACK: "local"}  # no label: a rack by itself
            _running_job_lists_its_domains(api, env)
        finally:
            api.close()


def _running_job_lists_its_domains(api: Api, env: dict[str, str]) -> None:
    """A running job's row in ``GET /v1/jobs`` and ``hetsched jobs`` has its domains: one
    task of 2 GPUs in one rack takes r1 (4 free GPUs), the smaller of r1 and r2 (6)."""
    body = {
        "name": "hold",
        "resources": {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "count": 2}]},
        "topology": {"required": RACK},
        "command": [sys.executable, "-c", "import time; time.sleep(60)"],
    }
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    try:
        api.wait(api.alice, job_id, {"running"}, 60)
        (row,) = [j for j in api.alice.get("/v1/jobs").json() if j["id"] == job_id]
        assert row["domains"] == [{RACK: "r1"}]
        listed = CliRunner().invoke(app, ["jobs"], env=env)
        assert listed.exit_code == 0, listed.output
        (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith(job_id)]
        assert line.split()[-3:] == ["r1:", "1", "task"], listed.stdout
    finally:
        api.alice.post(f"/v1/jobs/{job_id}/cancel")


def test_levels_and_this_node_s_domain_come_from_the_command_line(tmp_path: Path) -> None:
    # a cluster file without levels: --topology-level gives them, --node-label the local
    # node's rack (without it the local node is a rack by itself, as in the test above)
    cluster = tmp_path / "racks.yaml"
    cluster.write_text("nodes:" + CLUSTER.split("nodes:", 1)[1])
    options = service_options(
        tmp_path, cluster=[cluster], topology_levels=(RACK,), node_labels={RACK: "r1"}
    )
    with serving(options) as api:
        nodes = api.alice.get("/v1/nodes").json()
        domains = {n["name"]: n.get("domains") for n in nodes}
        assert domains == {
            "local": {RACK: "r1"},
            **{f"n{i}": {RACK: "r1"} for i in range(2)},
            **{f"m{i}": {RACK: "r2"} for i in range(3)},
        }


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--node-label", "rack"], "--node-label expects KEY=VALUE, got 'rack'"),
        (["--topology-level", "a", "--topology-level", "a"], "level 'a' is listed twice"),
        (
            ["--executor", "ray", "--ray-address", "127.0.0.1:1", "--node-label", "a=b"],
            "--node-label: with --executor ray the nodes and their devices come from the Ray",
        ),
    ],
)
def test_up_refuses_bad_topology_options_before_it_starts(
    tmp_path: Path, args: list[str], error: str
) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(app, ["up", "--home", str(home), *args])
    assert result.exit_code != 0
    assert error in " ".join(result.output.split()), result.output
    assert not home.exists()


def test_dashboard_groups_nodes_by_domain(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = (
        os.environ.get("HETSCHED_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    )
    if not Path(chromium).exists():
        pytest.skip(f"no chromium at {chromium}")
    cluster = tmp_path / "racks.yaml"
    cluster.write_text(CLUSTER)
    options = service_options(tmp_path, cluster=[cluster])
    with serving(options) as api, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            sync_api.expect.set_options(timeout=30_000)
            page.goto(f"{api.url}/ui?refresh=0.5")
            page.fill("#token", api.svc.admin_token)
            page.click("#connect")
            cards = page.locator("#nodes [data-node]")
            sync_api.expect(cards).to_have_count(6)
            # by domain first: the local node (a rack of its own), then r1, then r2
            names = [cards.nth(i).get_attribute("data-node") for i in range(6)]
            assert names == ["local", "n0", "n1", "m0", "m1", "m2"]
            sync_api.expect(page.locator("[data-node='m0'] header .badge")).to_have_text("r2")
        finally:
            browser.close()
