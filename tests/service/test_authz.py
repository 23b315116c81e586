"""Authorization as a table: each kind of caller against each route, with the status.

Every route of the app must have a row here (a new route without one fails the test), so
no endpoint ships without an authorization decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_fixtures import Api, job_body, service_options, serving

from hetsched.service.testing import running

CALLERS = ("none", "bad", "alice", "bob", "admin")

#: (method, path template, body) -> expected status per caller. {job} is alice's job.
#: Others' job ids answer 404, exactly like unknown ids, so ids cannot be probed.
TABLE: list[tuple[str, str, object, dict[str, int]]] = [
    ("GET", "/healthz", None, dict.fromkeys(CALLERS, 200)),
    ("GET", "/readyz", None, dict.fromkeys(CALLERS, 200)),
    # Prometheus: any valid token (the service's --metrics-public opens it)
    ("GET", "/metrics", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    # the dashboard's static files hold no data; the page calls the API with a token
    ("GET", "/ui", None, dict.fromkeys(CALLERS, 200)),
    ("GET", "/ui/app.js", None, dict.fromkeys(CALLERS, 200)),
    ("GET", "/ui/style.css", None, dict.fromkeys(CALLERS, 200)),
    # the API description and its viewers: any valid token (--public-docs opens them)
    (
        "GET",
        "/openapi.json",
        None,
        {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200},
    ),
    ("GET", "/docs", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    ("GET", "/redoc", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    ("GET", "/v1/history", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    # the dashboard's banners: any token; a user sees guard alerts of their own jobs only
    ("GET", "/v1/alerts", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    (
        "POST",
        "/v1/jobs",
        job_body(name="x"),
        {"none": 401, "bad": 401, "alice": 201, "bob": 201, "admin": 201},
    ),
    (
        "POST",
        "/v1/jobs",
        job_body(name="x", queue="team-a"),
        {"none": 401, "bad": 401, "alice": 201, "bob": 403, "admin": 201},
    ),
    (
        "POST",
        "/v1/jobs",
        job_body(name="x", user="bob"),
        {"none": 401, "bad": 401, "alice": 403, "bob": 201, "admin": 201},
    ),
    (
        "POST",
        "/v1/jobs/batch",
        {"jobs": [job_body(name="x"), job_body(name="y")]},
        {"none": 401, "bad": 401, "alice": 201, "bob": 201, "admin": 201},
    ),
    (
        "POST",
        "/v1/jobs/batch",
        {"jobs": [job_body(name="x", queue="team-a")]},
        {"none": 401, "bad": 401, "alice": 201, "bob": 403, "admin": 201},
    ),
    ("GET", "/v1/jobs", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    (
        "GET",
        "/v1/jobs/{job}",
        None,
        {"none": 401, "bad": 401, "alice": 200, "bob": 404, "admin": 200},
    ),
    (
        "GET",
        "/v1/jobs/{job}/why",
        None,
        {"none": 401, "bad": 401, "alice": 200, "bob": 404, "admin": 200},
    ),
    (
        "GET",
        "/v1/jobs/{job}/logs",
        None,
        {"none": 401, "bad": 401, "alice": 200, "bob": 404, "admin": 200},
    ),
    (
        "POST",
        "/v1/jobs/{job}/cancel",
        None,
        {"none": 401, "bad": 401, "alice": 202, "bob": 404, "admin": 202},
    ),
    # many at once: a user's own jobs; another user's only for an admin
    (
        "POST",
        "/v1/jobs/cancel",
        {"mine": True, "dry_run": True},
        {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200},
    ),
    (
        "POST",
        "/v1/jobs/cancel",
        {"user": "alice", "dry_run": True},
        {"none": 401, "bad": 401, "alice": 200, "bob": 403, "admin": 200},
    ),
    # a federation's lease: admin only (a user could otherwise keep a lapsed lease alive)
    (
        "POST",
        "/v1/federation/lease",
        {"federation": "fed", "lease_s": 10.0},
        {"none": 401, "bad": 401, "alice": 403, "bob": 403, "admin": 200},
    ),
    # what-if: capacity only, like /v1/nodes
    (
        "POST",
        "/v1/whatif",
        {"jobs": [job_body(name="x")]},
        {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200},
    ),
    ("GET", "/v1/nodes", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    ("GET", "/v1/queues", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    (
        "POST",
        "/v1/tokens",
        {"user": "eve"},
        {"none": 401, "bad": 401, "alice": 403, "bob": 403, "admin": 201},
    ),
    ("GET", "/v1/tokens", None, {"none": 401, "bad": 401, "alice": 403, "bob": 403, "admin": 200}),
    # a task's checkpoint report takes that task's own token only, never a user's
    ("POST", "/v1/checkpoints", {"task": "j/0#1", "step": 1}, dict.fromkeys(CALLERS, 401)),
    # progress: a task's own token only, as checkpoints
    ("POST", "/v1/progress", {"task": "j/0#1", "steps": 1}, dict.fromkeys(CALLERS, 401)),
    # learned speeds: any valid token (like the node view, no job of anybody's)
    ("GET", "/v1/speeds", None, {"none": 401, "bad": 401, "alice": 200, "bob": 200, "admin": 200}),
    (
        "DELETE",
        "/v1/tokens/{token}",
        None,
        {"none": 401, "bad": 401, "alice": 403, "bob": 403, "admin": 200},
    ),
]


@pytest.fixture(scope="module")
def module_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with serving(service_options(tmp_path_factory.mktemp("authz"))) as api:
        yield api


def _clients(api: Api) -> dict[str, httpx.Client]:
    return {
        "none": api.client(None),
        "bad": api.client("hs_not-a-real-token"),
        "alice": api.alice,
        "bob": api.bob,
        "admin": api.admin,
    }


def test_every_route_has_a_row(module_api: Api) -> None:
    app = module_api.svc.built.app
    routes = {
        (method, route.path)
        for route in app.routes
        for method in getattr(route, "methods", set()) - {"HEAD"}
    }
    covered = {
        (m, p.replace("{job}", "{job_id}").replace("{token}", "{token_id}")) for m, p, *_ in TABLE
    }
    assert routes == covered


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    TABLE,
    ids=[f"{m} {p} #{i}" for i, (m, p, *_rest) in enumerate(TABLE)],
)
def test_authorization(
    module_api: Api,
    caller: str,
    method: str,
    path: str,
    body: object,
    expected: dict[str, int],
) -> None:
    api = module_api
    # a fresh long-running job of alice's, and a fresh token, for each case
    job = api.alice.post("/v1/jobs", json=job_body(name="target", command=["sleep", "30"])).json()
    token = api.admin.post("/v1/tokens", json={"user": "mallory"}).json()["id"]
    url = path.format(job=job["id"], token=token)
    client = _clients(api)[caller]
    answer = (
        client.request(method, url, json=body) if body is not None else client.request(method, url)
    )
    assert answer.status_code == expected[caller], answer.text
    api.admin.post(f"/v1/jobs/{job['id']}/cancel")


def test_public_docs_serves_the_api_description_without_a_token(tmp_path: Path) -> None:
    options = service_options(tmp_path, docs_public=True)
    with running(options) as svc, httpx.Client(base_url=svc.url, timeout=30) as anonymous:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert anonymous.get(path).status_code == 200, path
        assert "/v1/jobs" in anonymous.get("/openapi.json").json()["paths"]
        # nothing else opens with it
        assert anonymous.get("/v1/jobs").status_code == 401


def test_failed_authentication_is_rate_limited(tmp_path: Path) -> None:
    with serving(service_options(tmp_path, auth_failure_rate=0.5)) as api:
        bad = api.client("hs_wrong")
        statuses = [bad.get("/v1/jobs").status_code for _ in range(10)]
        assert statuses[0] == 401
        assert 429 in statuses
        # a valid token is not affected by someone else's failures
        assert api.alice.get("/v1/jobs").status_code == 200


def test_per_token_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    with serving(service_options(tmp_path, rate_limit=1.0)) as api:
        answers = [api.alice.get("/v1/nodes") for _ in range(10)]
        limited = [a for a in answers if a.status_code == 429]
        assert limited and int(limited[0].headers["retry-after"]) >= 1
        assert api.bob.get("/v1/nodes").status_code == 200
