"""The dashboard at /ui in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; no browser is ever downloaded) against the real demo service.

Screenshots go to ``test-artifacts/ui/`` at the repository root (or under
``$HETSCHED_TEST_ARTIFACTS``); the test prints where.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_fixtures import Api, job_body, service_options, serving

from hetsched.service.server import Options

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

CHROMIUM = os.environ.get("HETSCHED_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"no chromium at {CHROMIUM} (.ci/run installs Debian's chromium package)",
)


@pytest.fixture
def artifacts() -> Path:
    base = Path(os.environ.get("HETSCHED_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder = base / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots in {folder}")
    return folder


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Api]:
    # this machine gets two fake L4s, one of them failed, next to the demo's simulated nodes
    devices = tmp_path / "devices.yaml"
    devices.write_text(
        "devices:\n"
        "  - {class: gpu, vendor: nvidia, model: L4, count: 1}\n"
        "  - {class: gpu, vendor: nvidia, model: L4, count: 1, health: unhealthy}\n"
    )
    options = Options(
        home=tmp_path / "home",
        demo=True,
        node_name="local",
        fake_devices=devices,
        kill_grace_s=1.0,
    )
    with serving(options) as api:
        yield api


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def test_dashboard_shows_the_demo_cluster_and_live_jobs(
    demo: Api, browser: Any, artifacts: Path
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    problems: list[str] = []
    # the browser logs the refused bad token below as a console error; nothing else may fail
    page.on(
        "console",
        lambda m: problems.append(m.text) if m.type == "error" and "401" not in m.text else None,
    )
    page.on("pageerror", lambda e: problems.append(str(e)))
    # requests that leave the service would fail here (no internet): record any attempt
    page.on(
        "request",
        lambda r: None if r.url.startswith(demo.url) else problems.append(f"fetched {r.url}"),
    )
    expect = sync_api.expect
    # generous: a loaded CI machine; a passing run waits only for the next refresh
    expect.set_options(timeout=30_000)

    page.goto(f"{demo.url}/ui?refresh=0.5")
    expect(page.locator("#login-form")).to_be_visible()
    page.screenshot(path=str(artifacts / "1-login.png"))

    # a wrong token is refused with a readable message
    page.fill("#token", "hs_not-a-token")
    page.click("#connect")
    expect(page.locator("#login-error")).to_contain_text("refused")

    page.fill("#token", demo.svc.admin_token)
    page.click("#connect")
    nodes = page.locator("#nodes")
    for name in ("demo-a100-0", "demo-v100-0", "demo-t4-0", "demo-t4-1", "demo-fpga-0"):
        expect(nodes.locator(f"[data-node='{name}']")).to_be_visible()
    a100 = nodes.locator("[data-node='demo-a100-0'] .device")
    expect(a100).to_have_count(4)
    expect(a100.first.locator(".model")).to_have_text("A100")
    expect(nodes.locator("[data-node='demo-fpga-0'] .model")).to_have_text("U250")
    expect(page.locator("#queues [data-queue='team-a']")).to_contain_text("gpu")
    # the failed device is marked, on its node and in the header
    local = nodes.locator("[data-node='local'] .device")
    expect(local).to_have_count(2)
    expect(local.locator(".health.bad")).to_have_count(1)
    expect(local.locator(".dval")).to_have_text(["0%", "unhealthy"])
    expect(page.locator("#summary")).to_contain_text("11/12")  # 10 demo devices, 2 local
    # and in the banners above the charts, with the watcher's reason
    (device,) = demo.admin.get("/v1/alerts").json()["devices"]
    banners = page.locator("#alerts")
    expect(banners).to_be_visible()
    expect(banners.locator(".alert")).to_have_count(1)
    expect(banners).to_contain_text(
        f"Device {device['id']} ({device['model']}): {device['reason'] or 'unhealthy'}"
    )
    page.screenshot(path=str(artifacts / "2-cluster.png"), full_page=True)

    # a newly submitted job appears, and its A100s fill up on their node
    hold = demo.admin.post(
        "/v1/jobs",
        json=job_body(
            name="hold-a100s",
            command=["sleep", "60"],
            resources={
                "cpu": "4",
                "memory": "16Gi",
                "devices": [{"class": "gpu", "count": 4, "model": "A100"}],
            },
        ),
    ).json()
    row = page.locator(f"#jobs [data-job='{hold['id']}']")
    expect(row).to_contain_text("hold-a100s")
    expect(row.locator(".badge")).to_have_text("running")
    expect(a100.locator(".dval")).to_have_text(["100%"] * 4)

    # a job that cannot start now explains why, readably, in its row
    waiting = demo.admin.post(
        "/v1/jobs",
        json=job_body(
            name="needs-a100s",
            resources={
                "cpu": "4",
                "memory": "16Gi",
                "devices": [{"class": "gpu", "count": 2, "model": "A100"}],
            },
        ),
    ).json()
    assert waiting["state"] == "pending"
    pending_row = page.locator(f"#jobs [data-job='{waiting['id']}']")
    expect(pending_row.locator(".badge")).to_have_text("pending")
    explanation = pending_row.locator(".explanation")
    expect(explanation).to_be_visible()
    why = demo.admin.get(f"/v1/jobs/{waiting['id']}/why").json()["explanation"]
    expect(explanation.locator(".summary-line")).to_have_text(why["summary"])
    # readable: the text is not clipped, and dark enough on its background
    # (the page re-renders twice a second: between two renders the row may be detached)
    box = None
    for _ in range(100):
        box = explanation.bounding_box()
        if box is not None:
            break
        page.wait_for_timeout(100)
    assert box is not None and box["width"] > 200 and box["height"] > 10
    # the charts have drawn lines from the history
    several = re.compile(r"^M[^L]+(L[^L]+){2,}$")
    expect(page.locator("#chart-alloc svg path.line").first).to_have_attribute("d", several)
    expect(page.locator("#chart-queue svg path.line").first).to_have_attribute("d", several)
    expect(page.locator("#legend-queue")).to_contain_text("default")
    expect(page.locator("#summary")).to_contain_text("pending")
    page.screenshot(path=str(artifacts / "3-pending-explained.png"), full_page=True)
    page.locator("#jobs-card").screenshot(path=str(artifacts / "4-jobs.png"))
    page.locator("#queues-card").screenshot(path=str(artifacts / "5-queues.png"))

    # a narrow window still lays out (the phone-width shot is for a person to look at)
    page.set_viewport_size({"width": 420, "height": 900})
    expect(nodes.locator("[data-node='demo-a100-0']")).to_be_visible()
    page.screenshot(path=str(artifacts / "6-narrow.png"), full_page=True)

    assert problems == []
    demo.admin.post(f"/v1/jobs/{hold['id']}/cancel")


def test_a_wedged_loop_is_the_first_banner(tmp_path: Path, browser: Any, artifacts: Path) -> None:
    # a real wedge: a running task's allocation row vanishes from the store, then a turn
    # fails; the rebuilt core would hold a device the store says is free, so the loop stops
    # scheduling and says why
    options = service_options(tmp_path)
    gpu = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "model": "A100"}]}
    mi250 = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "model": "MI250"}]}
    with serving(options) as api:
        held = api.alice.post(
            "/v1/jobs", json=job_body(command=["sleep", "60"], resources=gpu)
        ).json()
        api.wait(api.alice, held["id"], {"running"})
        db = sqlite3.connect(options.home / "hetsched.db")
        with db:
            db.execute("DELETE FROM allocations")
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON allocations "
                "BEGIN SELECT RAISE(ABORT, 'injected'); END"
            )
        db.close()
        api.alice.post("/v1/jobs", json=job_body(name="trigger", resources=mi250))
        deadline = time.monotonic() + 60
        while not api.admin.get("/v1/alerts").json()["wedged"]:
            assert time.monotonic() < deadline, "the loop did not wedge"
            time.sleep(0.1)
        wedged = api.admin.get("/v1/alerts").json()["wedged"]
        assert "disagree" in wedged

        page = browser.new_page(viewport={"width": 1280, "height": 900})
        expect = sync_api.expect
        expect.set_options(timeout=30_000)
        page.goto(f"{api.svc.url}/ui?refresh=0.5")
        page.fill("#token", api.svc.admin_token)
        page.click("#connect")
        first = page.locator("#alerts .alert").first
        expect(first).to_have_class(re.compile(r"\bwedge\b"))
        expect(first).to_have_attribute("role", "alert")
        expect(first).to_contain_text("Scheduling is stopped:")
        expect(first).to_contain_text("disagree on what is allocated")
        # said once: the retries' "wedged" alerts do not repeat it below
        expect(page.locator("#alerts")).not_to_contain_text("Loop wedged")
        page.screenshot(path=str(artifacts / "7-wedged.png"), full_page=True)
        api.alice.post(f"/v1/jobs/{held['id']}/cancel")


def test_the_jobs_table_shows_a_dependency_chain_and_array_progress(
    tmp_path: Path, browser: Any, artifacts: Path
) -> None:
    options = service_options(tmp_path)
    flag = tmp_path / "go"
    wait = ["sh", "-c", f"until test -e {flag}; do sleep 0.05; done"]
    with serving(options) as api:
        sweep = api.alice.post(
            "/v1/jobs", json=job_body(name="sweep", array="0-9%2", command=wait)
        ).json()
        report = api.alice.post(
            "/v1/jobs", json=job_body(name="report", after=["sweep"], command=["true"])
        ).json()
        api.wait(api.alice, sweep["id"], {"running"})
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        expect = sync_api.expect
        expect.set_options(timeout=30_000)
        page.goto(f"{api.svc.url}/ui?refresh=0.5")
        page.fill("#token", api.tokens["alice"])
        page.click("#connect")
        row = page.locator(f"#jobs [data-job='{report['id']}']")
        expect(row.locator(".workflow")).to_have_text("after sweep")
        expect(row).to_contain_text("waiting for sweep (running, 0 of 10 done)")
        array = page.locator(f"#jobs [data-job='{sweep['id']}'] .array-progress")
        expect(array).to_contain_text("array 0-9%2: 0 of 10 done")
        expect(array).to_contain_text("8 not created yet")
        element = page.locator(f"#jobs [data-job='{sweep['id']}[0]'] .workflow")
        expect(element).to_have_text("element 0 of sweep")
        expect(page.locator(f"#jobs [data-job='{sweep['id']}[0]'] .array-progress")).to_have_count(
            0
        )
        page.screenshot(path=str(artifacts / "8-workflows.png"), full_page=True)
        flag.touch()
        api.wait(api.alice, report["id"], {"succeeded"})


def test_an_elastic_job_shows_its_count_over_time_and_a_job_its_groups(
    tmp_path: Path, browser: Any, artifacts: Path
) -> None:
    gpu = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "model": "A100"}]}
    with serving(service_options(tmp_path)) as api:
        other = api.alice.post(
            "/v1/jobs", json=job_body(name="other", command=["sleep", "60"], resources=gpu)
        ).json()["id"]
        api.wait(api.alice, other, {"running"})
        elastic = job_body(
            name="elastic", command=["sleep", "60"], resources=gpu, replicas=2, min_replicas=1
        )
        elastic_id = api.alice.post("/v1/jobs", json=elastic).json()["id"]
        api.wait(api.alice, elastic_id, {"running"})
        api.alice.post(f"/v1/jobs/{other}/cancel")
        deadline = time.monotonic() + 60
        while len(api.alice.get(f"/v1/jobs/{elastic_id}/why").json()["counts"]) < 2:
            assert time.monotonic() < deadline, "the elastic job did not grow"
            time.sleep(0.1)
        groups = job_body(
            name="hetero",
            command=["sleep", "60"],
            resources=None,
            groups=[
                {"name": "driver", "resources": {"cpu": "15"}},
                {"name": "workers", "replicas": 2, "resources": gpu},
            ],
        )
        del groups["resources"]
        answer = api.alice.post("/v1/jobs", json=groups)
        assert answer.status_code == 201, answer.text

        page = browser.new_page(viewport={"width": 1440, "height": 900})
        expect = sync_api.expect
        expect.set_options(timeout=30_000)
        page.goto(f"{api.svc.url}/ui?refresh=0.5")
        page.fill("#token", api.tokens["alice"])
        page.click("#connect")
        row = page.locator(f'tr[data-job="{elastic_id}"]')
        expect(row).to_contain_text("elastic 1–2 tasks · count 1 (")
        expect(row).to_contain_text(") → 2 (")
        hetero = page.locator("tr.job", has_text="hetero")
        expect(hetero).to_contain_text(
            "driver: 15 CPU; workers: 1 CPU · 256Mi · 1× A100 · × 2 tasks"
        )
        # it waits whole (the elastic job holds both A100s), explained per group
        expect(hetero).to_contain_text("driver: no node has 15 free CPUs; workers: no node has")
        page.screenshot(path=str(artifacts / "8-elastic.png"), full_page=True)
        api.alice.post(f"/v1/jobs/{elastic_id}/cancel")
