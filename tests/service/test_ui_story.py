"""The dashboard tells what happened, at 1440 px and on a phone (390 px), in a real headless
Chromium (Debian's ``chromium`` driven by Playwright): who preempted a job and when, which
device's failure displaced one, banners that name the device and since when, a stranded
accelerator flagged on its node, the preemption line only where preemption matters, and
tables that stay usable at 390 px. Screenshots go to ``test-artifacts/ui/``."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from service_fixtures import Api, job_body, serving

from hetsched.service.server import Options

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

CHROMIUM = os.environ.get("HETSCHED_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
HEALTHY = "devices:\n  - {class: gpu, vendor: nvidia, model: L4, count: 1}\n"
FAILED = "devices:\n  - {class: gpu, vendor: nvidia, model: L4, count: 1, health: unhealthy}\n"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (install Debian's chromium)"
)


@pytest.fixture
def artifacts() -> Path:
    base = Path(os.environ.get("HETSCHED_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder = base / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots in {folder}")
    return folder


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Api, Path]]:
    devices = tmp_path / "devices.yaml"
    devices.write_text(HEALTHY)
    options = Options(
        home=tmp_path / "home",
        demo=True,
        node_name="local",
        fake_devices=devices,
        kill_grace_s=1.0,
        watch_interval_s=0.2,
    )
    with serving(options) as api:
        yield api, devices


def _sleeper(name: str, user: str, **fields: Any) -> dict[str, object]:
    return job_body(name=name, user=user, command=["sleep", "120"], **fields)


def _gpus(count: int, model: str, cpu: str = "2") -> dict[str, object]:
    return {
        "cpu": cpu,
        "memory": "4Gi",
        "devices": [{"class": "gpu", "count": count, "model": model}],
    }


def _box(page: Any, locator: Any) -> dict[str, float]:
    """The element's box; the page re-renders twice a second, so between two renders the
    element may be detached for a moment: asked again until it is there."""
    for _ in range(100):
        box = locator.bounding_box()
        if box is not None:
            return dict(box)
        page.wait_for_timeout(100)
    raise AssertionError(f"{locator} never laid out")


def _submit(api: Api, body: dict[str, object]) -> str:
    answer = api.admin.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


@contextmanager
def _dashboard(api: Api) -> Iterator[Any]:
    """The dashboard in Chromium at 1440 px, connected with the admin's token."""
    sync_api.expect.set_options(timeout=30_000)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(f"{api.url}/ui?refresh=0.5")
            page.fill("#token", api.svc.admin_token)
            page.click("#connect")
            yield page
        finally:
            browser.close()


def test_the_dashboard_tells_what_happened(cluster: tuple[Api, Path], artifacts: Path) -> None:
    api, devices = cluster
    expect = sync_api.expect
    with _dashboard(api) as page:
        nodes = page.locator("#nodes")

        # a job that takes 30 of the A100 node's 32 cores strands its four free A100s
        hog = _submit(api, _sleeper("cpu-hog", "bob", resources={"cpu": "30", "memory": "8Gi"}))
        api.wait(api.admin, hog, {"running"})
        flag = nodes.locator("[data-node='demo-a100-0'] .badge.stranded")
        expect(flag).to_have_text("4 stranded")
        expect(nodes.locator("[data-node='demo-v100-0'] .badge.stranded")).to_have_count(0)
        # simulated devices are said to be unmeasured, not drawn at a flat 0 %
        expect(nodes.locator("[data-node='demo-a100-0'] .tag.sim")).to_have_text("simulated")
        expect(nodes.locator("[data-node='local'] .tag.sim")).to_have_count(0)
        expect(page.locator("#legend-alloc .unmeasured[data-class='fpga']")).to_have_text(
            "fpga utilization: not measured (simulated devices)"
        )
        expect(page.locator("#legend-alloc")).not_to_contain_text("fpga measured")
        page.screenshot(path=str(artifacts / "story-1-stranded-1440.png"), full_page=True)
        api.admin.post(f"/v1/jobs/{hog}/cancel")
        api.wait(api.admin, hog, {"cancelled"})
        expect(flag).to_have_count(0)

        # preemption: the row says by which job, whose, at what priority, and when
        embed = _submit(api, _sleeper("batch-embed", "erin", resources=_gpus(4, "A100")))
        api.wait(api.admin, embed, {"running"})
        urgent = _submit(
            api, _sleeper("urgent-train", "alice", priority=100, resources=_gpus(2, "A100"))
        )
        api.wait(api.admin, urgent, {"running"})
        api.wait(api.admin, embed, {"pending"})
        row = page.locator(f"#jobs [data-job='{embed}']")
        expect(row.locator(".story.preempted")).to_have_text(
            re.compile(r"^Preempted by urgent-train \(alice, priority 100\) at \d\d:\d\d:\d\d")
        )

        # a device failure: the displaced job names the device, the banner since when
        l4 = _submit(api, _sleeper("l4-job", "bob", resources=_gpus(1, "L4", cpu="0.1")))
        api.wait(api.admin, l4, {"running"})
        devices.write_text(FAILED)
        api.wait(api.admin, l4, {"pending"})
        l4_row = page.locator(f"#jobs [data-job='{l4}']")
        expect(l4_row.locator(".story.displaced")).to_contain_text(
            "Displaced: device local/gpu0 unhealthy"
        )
        banner = page.locator("#alerts .alert", has_text="local/gpu0")
        expect(banner).to_contain_text(re.compile(r"Device local/gpu0 \(L4\) · since \d\d:"))

        # the preemption line shows where a lower-priority job runs, not elsewhere
        _submit(api, _sleeper("pinned", "bob", preemptible=False, resources=_gpus(2, "V100")))
        wants = _submit(
            api, _sleeper("wants-v100s", "alice", priority=50, resources=_gpus(3, "V100"))
        )
        api.wait(api.admin, wants, {"pending"})
        wants_row = page.locator(f"#jobs [data-job='{wants}'] .explanation")
        expect(wants_row).to_contain_text("no job may be preempted")
        embed_why = row.locator(".explanation")
        expect(embed_why).to_be_visible()
        expect(embed_why).not_to_contain_text("preemption:")
        page.screenshot(path=str(artifacts / "story-2-1440.png"), full_page=True)

        # a phone: nothing scrolls sideways, the job and queue rows show their fields
        page.set_viewport_size({"width": 390, "height": 844})
        expect(row.locator(".story.preempted")).to_be_visible()
        page.wait_for_timeout(1200)  # a refresh at the new width
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for locator in (row, page.locator("#queues [data-queue='default']")):
            box = _box(page, locator)
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        name_box = _box(page, row.locator(".jname strong"))
        assert name_box["x"] + name_box["width"] <= 390, name_box
        page.screenshot(path=str(artifacts / "story-3-390.png"), full_page=True)
        page.locator("#jobs-card").screenshot(path=str(artifacts / "story-4-jobs-390.png"))
        page.locator("#queues-card").screenshot(path=str(artifacts / "story-5-queues-390.png"))


def test_a_banner_names_the_job_its_user_and_the_time(
    cluster: tuple[Api, Path], artifacts: Path
) -> None:
    """A scheduling turn that fails on a job (the store refuses the FPGA's allocation):
    the loop's banner says when, and names the job by its name and user beside its id."""
    api, _ = cluster
    nodes = api.admin.get("/v1/nodes").json()
    fpga = next(d["id"] for n in nodes for d in n["devices"] if d["class"] == "fpga")
    db = sqlite3.connect(api.svc.built.token_file.parent / "hetsched.db")
    with db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON allocations "
            f"WHEN NEW.device_id = '{fpga}' BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    db.close()
    wants = {
        "cpu": "1",
        "memory": "1Gi",
        "devices": [{"class": "fpga", "count": 1}],
        "tolerations": [{"key": "dedicated", "value": "fpga"}],
    }
    doomed = _submit(api, _sleeper("bitstream-build", "frank", resources=wants))
    expect = sync_api.expect
    with _dashboard(api) as page:
        banner = page.locator("#alerts .alert", has_text="Loop turn failed").first
        expect(banner).to_contain_text(re.compile(r"Loop turn failed · \d\d:\d\d:\d\d"))
        expect(banner).to_contain_text(f"bitstream-build (frank, {doomed})")
        page.screenshot(path=str(artifacts / "story-6-banner-1440.png"), full_page=True)
