"""``GET /v1/jobs`` and ``hetsched jobs`` page: a server-side limit and a cursor, against the
real service (real HTTP, a real SQLite file)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from service_fixtures import Api, job_body, service_options, serving
from typer.testing import CliRunner

from hetsched.cli.main import app


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One service for the module; each test lists the jobs of users of its own."""
    with serving(service_options(tmp_path_factory.mktemp("paging"), rate_limit=0)) as api:
        yield api


def _user(api: Api) -> tuple[httpx.Client, str]:
    """A client for a new user (no jobs yet) and its token."""
    answer = api.admin.post("/v1/tokens", json={"user": f"u{uuid.uuid4().hex[:10]}"})
    assert answer.status_code == 201, answer.text
    token = answer.json()["token"]
    return api.client(token), token


def _submit(client: httpx.Client, names: list[str]) -> list[str]:
    answer = client.post("/v1/jobs/batch", json={"jobs": [job_body(name=n) for n in names]})
    assert answer.status_code == 201, answer.text
    return [j["id"] for j in answer.json()["jobs"]]


def _walk(client: httpx.Client, **params: object) -> tuple[list[str], list[int]]:
    """Every page in turn: the ids in the order served and each page's length."""
    ids: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        answer = client.get("/v1/jobs", params=query)
        assert answer.status_code == 200, answer.text
        ids += [j["id"] for j in answer.json()]
        sizes.append(len(answer.json()))
        cursor = answer.headers.get("X-Next-Cursor")
        if cursor is None:
            return ids, sizes


def test_pages_cover_every_job_once_in_arrival_order_and_stop(api: Api) -> None:
    (me, _), (other, _) = _user(api), _user(api)
    mine = _submit(me, [f"a{i}" for i in range(7)])
    theirs = _submit(other, ["b0", "b1"])
    ids, sizes = _walk(me, all=True, limit=3)
    assert (ids, sizes) == (mine, [3, 3, 1])
    ids, sizes = _walk(me, all=True, limit=3, order="newest")
    assert (ids, sizes) == (mine[::-1], [3, 3, 1])
    # a page exactly as long as what is left is the last one: no cursor
    assert _walk(me, all=True, limit=7) == (mine, [7])
    everyone = _walk(api.admin, all=True, limit=4)[0]
    assert [i for i in everyone if i in mine + theirs] == mine + theirs
    assert len(everyone) == len(set(everyone))
    owner = other.get(f"/v1/jobs/{theirs[0]}").json()["user"]
    assert _walk(api.admin, all=True, limit=1, user=owner)[0] == theirs


def test_the_state_filter_pages_too(api: Api) -> None:
    me, _ = _user(api)
    ids = _submit(me, [f"s{i}" for i in range(5)])
    for job_id in ids:
        api.wait(me, job_id, {"succeeded"})
    assert _walk(me, limit=2)[0] == []  # live jobs only by default
    assert _walk(me, state="succeeded", limit=2) == (ids, [2, 2, 1])
    assert _walk(me, state="pending,running", limit=2)[0] == []
    assert _walk(me, state="failed,succeeded", limit=10)[0] == ids


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "-1"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"state": "sleeping"}, "state"),
        ({"state": "pending,"}, "state"),
        ({"order": "random"}, "order"),
    ],
)
def test_a_bad_page_request_names_the_field(
    api: Api, params: dict[str, object], field: str
) -> None:
    answer = api.alice.get("/v1/jobs", params=params)
    assert answer.status_code == 422
    assert any(line.startswith(f"{field}:") for line in answer.json()["errors"]), answer.text


def _cli(api: Api, token: str, *args: str) -> tuple[int, str, str]:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": token}
    result = CliRunner().invoke(app, ["jobs", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_the_cli_shows_one_page_says_how_to_get_the_next_and_follows_them_all(api: Api) -> None:
    me, token = _user(api)
    ids = _submit(me, [f"c{i}" for i in range(5)])
    code, out, err = _cli(api, token, "--all", "--limit", "2", "-o", "json")
    assert code == 0, err
    assert [j["id"] for j in json.loads(out)] == ids[:2]
    [cursor] = [w for w in err.split() if w.isdigit()][:1]
    code, out, err = _cli(api, token, "--all", "--limit", "2", "--cursor", cursor, "-o", "json")
    assert [j["id"] for j in json.loads(out)] == ids[2:4]
    code, out, err = _cli(api, token, "--all", "--limit", "2", "--all-pages", "-o", "json")
    assert code == 0 and [j["id"] for j in json.loads(out)] == ids
    assert "next cursor" not in err
    code, out, err = _cli(api, token, "--all", "--newest", "--limit", "5", "-o", "json")
    assert [j["id"] for j in json.loads(out)] == ids[::-1] and "next cursor" not in err
    code, out, err = _cli(api, token, "--all", "--limit", "3")
    assert code == 0 and "Jobs (3)" in out and "next cursor" in err


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--limit", "0"], "--limit"),
        (["--limit", "10001"], "--limit"),
        (["--cursor", "x1"], "cursor"),
        (["--state", "asleep"], "state"),
    ],
)
def test_the_cli_refuses_a_bad_page_request(api: Api, args: list[str], text: str) -> None:
    code, out, err = _cli(api, api.tokens["alice"], *args)
    assert code != 0 and text in err, (out, err)
