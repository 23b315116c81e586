"""Batch submission: many jobs in one request, one transaction, all or nothing, every
problem reported with the index of its job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_fixtures import Api, job_body, service_options, serving

from hetsched.controlplane.schemas import MAX_BATCH_JOBS


@pytest.fixture(scope="module")
def module_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with serving(service_options(tmp_path_factory.mktemp("batch"), rate_limit=0)) as api:
        yield api


def _count(api: Api) -> int:
    return len(api.admin.get("/v1/jobs", params={"all": True, "limit": 10_000}).json())


GOOD = job_body(name="good")
BAD_FIELD = job_body(name="bad-field", resources={"cpu": "lots"})
CLOSED_QUEUE = job_body(name="closed", queue="team-a")  # bob may not submit there
TOO_BIG = job_body(
    name="too-big", resources={"cpu": "1", "devices": [{"class": "gpu", "count": 64}]}
)


def test_a_batch_is_stored_in_order_and_runs(module_api: Api) -> None:
    bodies = [job_body(name=f"b{i}", command=["true"]) for i in range(5)]
    answer = module_api.bob.post("/v1/jobs/batch", json={"jobs": bodies})
    assert answer.status_code == 201, answer.text
    jobs = answer.json()["jobs"]
    assert [j["name"] for j in jobs] == [f"b{i}" for i in range(5)]
    assert {j["user"] for j in jobs} == {"bob"} and len({j["id"] for j in jobs}) == 5
    for job in jobs:
        assert module_api.wait(module_api.bob, job["id"], {"succeeded"})["state"] == "succeeded"


def test_a_schema_error_names_the_item_and_field_and_stores_nothing(module_api: Api) -> None:
    before = _count(module_api)
    answer = module_api.bob.post("/v1/jobs/batch", json={"jobs": [GOOD, BAD_FIELD, GOOD]})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "nothing was stored" in detail["message"]
    assert detail["errors"] == [
        "jobs[1].resources.cpu: not a quantity: 'lots' (expected e.g. 500m, 2, 16Gi)"
    ]
    assert _count(module_api) == before


def test_every_refused_job_is_listed_by_index_and_nothing_is_stored(module_api: Api) -> None:
    before = _count(module_api)
    batch = {"jobs": [GOOD, CLOSED_QUEUE, GOOD, TOO_BIG]}
    answer = module_api.bob.post("/v1/jobs/batch", json=batch)
    assert answer.status_code == 403, answer.text  # the first refusal's own status
    detail = answer.json()["detail"]
    assert detail["message"] == "2 of 4 jobs refused: nothing was stored"
    first, second = detail["errors"]
    assert first == "jobs[1]: user bob may not submit to queue team-a"
    assert second.startswith("jobs[3]: resources: no node could ever hold a task")
    assert _count(module_api) == before


@pytest.mark.parametrize(
    ("case", "body", "status", "text"),
    [
        ("no jobs", {"jobs": []}, 422, "jobs"),
        ("not a list", {"jobs": GOOD}, 422, "jobs"),
        ("unknown field", {"jobs": [GOOD], "queue": "x"}, 422, "queue"),
        ("too many jobs", {"jobs": [GOOD] * (MAX_BATCH_JOBS + 1)}, 422, "jobs"),
        (
            "another user's job",
            {"jobs": [GOOD, job_body(user="alice")]},
            403,
            "jobs[1]: only an admin",
        ),
    ],
)
def test_bad_batches(module_api: Api, case: str, body: Any, status: int, text: str) -> None:
    before = _count(module_api)
    answer = module_api.bob.post("/v1/jobs/batch", json=body)
    assert answer.status_code == status, answer.text
    assert text in answer.text
    assert _count(module_api) == before


@pytest.mark.parametrize(
    ("case", "content", "status", "text"),
    [
        ("not JSON", b"{jobs: [", 400, "not valid JSON"),
        ("nested too deeply", b'{"jobs": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "too deeply"),
        ("over 8 MiB", b'{"jobs": [' + b" " * (9 << 20) + b"]}", 413, "too large"),
    ],
)
def test_bad_batch_bodies(
    module_api: Api, case: str, content: bytes, status: int, text: str
) -> None:
    headers = {"Content-Type": "application/json"}
    answer = module_api.bob.post("/v1/jobs/batch", content=content, headers=headers)
    assert answer.status_code == status, answer.text
    assert text in answer.text


def test_a_batch_of_one_mebibyte_and_more_is_accepted(module_api: Api) -> None:
    # the single-job route caps bodies at 1 MiB; a batch may be larger
    bodies = [job_body(name=f"big{i}", env={"PAD": "x" * 2000}) for i in range(600)]
    content = json.dumps({"jobs": bodies}).encode()
    assert len(content) > 1 << 20
    headers = {"Content-Type": "application/json"}
    answer = module_api.bob.post("/v1/jobs/batch", content=content, headers=headers)
    assert answer.status_code == 201, answer.text[:300]
    assert len(answer.json()["jobs"]) == 600


def test_an_idempotency_key_covers_the_whole_batch(module_api: Api) -> None:
    batch = {"jobs": [job_body(name="k0"), job_body(name="k1", priority=2)]}
    headers = {"Idempotency-Key": "batch-key", "Content-Type": "application/json"}
    first = module_api.bob.post("/v1/jobs/batch", content=json.dumps(batch), headers=headers)
    assert first.status_code == 201, first.text
    before = _count(module_api)
    again = json.dumps({"jobs": [dict(reversed(list(j.items()))) for j in batch["jobs"]]}, indent=1)
    replay = module_api.bob.post("/v1/jobs/batch", content=again, headers=headers)
    assert replay.status_code == 200, replay.text
    assert [j["id"] for j in replay.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    other = json.dumps({"jobs": [job_body(name="k0")]})
    assert module_api.bob.post("/v1/jobs/batch", content=other, headers=headers).status_code == 409
    # the same key for a single job is its own: it never replays the batch
    single = module_api.bob.post("/v1/jobs", json=job_body(name="k0"), headers=headers)
    assert single.status_code == 201
    assert _count(module_api) == before + 1


def test_an_admin_batch_may_name_users(module_api: Api) -> None:
    batch = {
        "jobs": [job_body(name="for-alice", user="alice"), job_body(name="for-bob", user="bob")]
    }
    answer = module_api.admin.post("/v1/jobs/batch", json=batch)
    assert answer.status_code == 201, answer.text
    assert [j["user"] for j in answer.json()["jobs"]] == ["alice", "bob"]


_KINDS = {"good": GOOD, "bad field": BAD_FIELD, "closed queue": CLOSED_QUEUE, "too big": TOO_BIG}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=8))
def test_all_or_nothing(module_api: Api, kinds: list[str]) -> None:
    before = _count(module_api)
    answer = module_api.bob.post("/v1/jobs/batch", json={"jobs": [_KINDS[k] for k in kinds]})
    if all(k == "good" for k in kinds):
        assert answer.status_code == 201, answer.text
        assert _count(module_api) == before + len(kinds)
        return
    assert answer.status_code in (403, 422), answer.text
    assert _count(module_api) == before
    errors = answer.json()["detail"]["errors"]
    if "bad field" in kinds:  # the schema is checked first, for every job
        expected = [i for i, k in enumerate(kinds) if k == "bad field"]
    else:
        expected = [i for i, k in enumerate(kinds) if k != "good"]
    assert [int(e.split("]")[0].removeprefix("jobs[")) for e in errors] == expected
