"""The bad-input corpus: every case answers a 4xx that names the field, never a 500, and a
rejected request stores nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_fixtures import Api, service_options, serving


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "ok",
        "command": ["true"],
        "resources": {"cpu": "1", "memory": "1Gi"},
    }
    for key, value in changes.items():
        if key == "resources":
            body["resources"] = {**body["resources"], **value}
        else:
            body[key] = value
    return body


def _gpu(**choice: Any) -> dict[str, Any]:
    return {"devices": [{"class": "gpu", **choice}]}


_LIST30 = "[" + ",".join(str(i) for i in range(30)) + "]"
#: ~27,000 comprehension bodies: took seconds of server CPU before selectors were bounded
_THREE_MAPS = f"{_LIST30}.map(a, {_LIST30}.map(b, {_LIST30}.map(c, a + b + c))).size() > 0"

#: (case, body, expected status, text the answer must contain)
CASES: list[tuple[str, Any, int, str]] = [
    ("negative count", _body(resources=_gpu(count=-1)), 422, "resources.devices[0].count"),
    ("fractional count", _body(resources=_gpu(count=1.5)), 422, "resources.devices[0].count"),
    ("count as string", _body(resources=_gpu(count="2")), 422, "resources.devices[0].count"),
    ("huge count", _body(resources=_gpu(count=10**30)), 422, "resources.devices[0].count"),
    ("int64 overflow", _body(resources=_gpu(count=2**63)), 422, "resources.devices[0].count"),
    ("more GPUs than any node", _body(resources=_gpu(count=64)), 422, "no node could ever"),
    ("memory beyond any node", _body(resources={"memory": "2Ti"}), 422, "no node could ever"),
    ("bad memory unit", _body(resources={"memory": "12XB"}), 422, "resources.memory"),
    ("negative memory", _body(resources={"memory": "-4G"}), 422, "resources.memory"),
    ("empty memory", _body(resources={"memory": ""}), 422, "resources.memory"),
    ("huge cpu", _body(resources={"cpu": "1e30"}), 422, "resources.cpu"),
    (
        "empty request",
        _body(resources={"cpu": 0, "memory": 0}),
        422,
        "empty request",
    ),
    ("unknown resource", _body(resources={"tpu": 1}), 422, "resources.tpu"),
    ("unknown device class", _body(resources={"devices": [{"class": "tpu"}]}), 422, "tpu"),
    ("share out of range", _body(resources=_gpu(share=1500)), 422, "share"),
    ("gang of zero", _body(replicas=2, gang=0), 422, "gang"),
    ("negative gang", _body(replicas=2, gang=-1), 422, "gang"),
    ("gang above replicas", _body(replicas=2, gang=3), 422, "gang"),
    (
        "gang larger than the cluster",
        _body(replicas=4, gang=4, resources=_gpu(model="A100")),
        422,
        "gang",
    ),
    ("zero replicas", _body(replicas=0), 422, "replicas"),
    ("name of 10,000 chars", _body(name="a" * 10_000), 422, "name"),
    ("name with ..", _body(name="../etc"), 422, "name"),
    ("name with slash", _body(name="a/b"), 422, "name"),
    ("name with NUL", _body(name="a\x00b"), 422, "name"),
    ("name with bidi override", _body(name="abc\u202egpj"), 422, "name"),
    ("name with zero-width space", _body(name="ab\u200bc"), 422, "name"),
    ("empty command", _body(command=[]), 422, "command"),
    ("empty program", _body(command=[""]), 422, "command"),
    ("NUL in argument", _body(command=["echo", "a\x00b"]), 422, "command"),
    ("argv too large", _body(command=["echo", "x" * 300_000]), 422, "command"),
    ("env key with =", _body(env={"A=B": "1"}), 422, "env"),
    ("denied env key", _body(env={"LD_PRELOAD": "/x.so"}), 422, "env"),
    ("reserved env key", _body(env={"HETSCHED_JOB_ID": "x"}), 422, "env"),
    ("relative workdir", _body(workdir="tmp"), 422, "workdir"),
    ("priority out of range", _body(priority=999_999), 422, "priority"),
    ("negative runtime", _body(max_runtime=-5), 422, "max_runtime"),
    ("absurd runtime", _body(max_runtime="1e9 days"), 422, "max_runtime"),
    ("too many retries", _body(max_restarts=10**6), 422, "max_restarts"),
    ("unknown field", _body(stauts="running"), 422, "stauts"),
    ("mass assignment: state", _body(state="running"), 422, "state"),
    ("mass assignment: id", _body(id="j1"), 422, "id"),
    ("mass assignment: submit time", _body(submit_time=5), 422, "submit_time"),
    ("depends_on is not a field", _body(depends_on=["self"]), 422, "depends_on"),
    ("bad selector", _body(resources=_gpu(selector="device.attributes[")), 422, "selector"),
    (
        "selector of three nested comprehensions (refused before it runs)",
        _body(resources=_gpu(selector=_THREE_MAPS)),
        422,
        "resources.devices[0].selector: selector refused: the nesting of comprehensions is 3",
    ),
    (
        "selector of two nested comprehensions over 30 elements",
        _body(resources=_gpu(selector=f"{_LIST30}.map(a, {_LIST30}.map(b, a * b)).size() > 0")),
        422,
        "max_cost",
    ),
    ("bad restart policy", _body(restart_policy="always"), 422, "restart_policy"),
    ("not an object", [1, 2], 422, "object"),
    ("unknown queue", _body(queue="nope"), 404, "nope"),
    ("queue not open to the user", _body(queue="team-a"), 403, "team-a"),
    (
        "over the queue's hard quota",
        _body(queue="small", replicas=2, gang=1, resources=_gpu()),
        403,
        "quota",
    ),
    ("another user's name", _body(user="alice"), 403, "admin"),
]


@pytest.fixture(scope="module")
def module_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with serving(service_options(tmp_path_factory.mktemp("bad"), rate_limit=0)) as api:
        yield api


def _count(api: Api) -> int:
    return len(api.admin.get("/v1/jobs", params={"all": True}).json())


@pytest.mark.parametrize(("case", "body", "status", "text"), CASES, ids=[c[0] for c in CASES])
def test_bad_submission(module_api: Api, case: str, body: Any, status: int, text: str) -> None:
    before = _count(module_api)
    answer = module_api.bob.post("/v1/jobs", json=body)
    assert answer.status_code == status, answer.text
    assert text in answer.text
    assert _count(module_api) == before


def test_the_good_body_of_the_table_is_accepted(module_api: Api) -> None:
    assert module_api.bob.post("/v1/jobs", json=_body()).status_code == 201


_DEEP = b'{"name": "deep", "resources": {"cpu": "1"}, "command": ' + b"[" * 5000 + b"]" * 5000
#: (case, body, content type, expected status, text the answer must contain)
BODIES: list[tuple[str, bytes, str, int, str]] = [
    ("invalid JSON", b"{not json", "application/json", 400, "not valid JSON"),
    ("valid JSON nested 5,000 levels in command", _DEEP + b"}", "application/json", 400, "deep"),
    ("wrong content type", b"name=x", "application/x-www-form-urlencoded", 415, "json"),
    ("body of 10 MiB", b"{" + b" " * (10 << 20) + b"}", "application/json", 413, "too large"),
]


@pytest.mark.parametrize(
    ("case", "content", "content_type", "status", "text"), BODIES, ids=[b[0] for b in BODIES]
)
def test_bad_body(
    module_api: Api, case: str, content: bytes, content_type: str, status: int, text: str
) -> None:
    before = _count(module_api)
    # a connection of its own: the server may answer 413 before the body is sent
    headers = {"Authorization": f"Bearer {module_api.tokens['bob']}", "Content-Type": content_type}
    with httpx.Client(base_url=module_api.url, timeout=30) as client:
        answer = client.post("/v1/jobs", content=content, headers=headers)
    assert answer.status_code == status, answer.text
    assert text in answer.text
    assert _count(module_api) == before


def test_deep_json_is_called_nested_too_deeply_not_invalid(module_api: Api) -> None:
    headers = {"Content-Type": "application/json"}
    answer = module_api.bob.post("/v1/jobs", content=_DEEP + b"}", headers=headers)
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "nested too deeply" in detail and "200 levels" in detail
    assert "not valid JSON" not in detail


def test_a_reused_idempotency_key_with_another_body_conflicts(module_api: Api) -> None:
    headers = {"Idempotency-Key": "same"}
    assert module_api.bob.post("/v1/jobs", json=_body(name="a"), headers=headers).status_code == 201
    before = _count(module_api)
    answer = module_api.bob.post("/v1/jobs", json=_body(name="b"), headers=headers)
    assert answer.status_code == 409
    assert _count(module_api) == before


def test_a_reused_idempotency_key_with_the_same_json_reserialized_replays(
    module_api: Api,
) -> None:
    body = _body(name="same-json", env={"B": "2", "A": "1"}, resources={"cpu": "1"})
    headers = {"Idempotency-Key": "reserialized", "Content-Type": "application/json"}
    first = module_api.bob.post("/v1/jobs", content=json.dumps(body), headers=headers)
    assert first.status_code == 201, first.text
    before = _count(module_api)
    # other whitespace, other key order at every level, an escaped character
    again = json.dumps(
        {k: body[k] for k in reversed(list(body))}
        | {"env": {"A": "1", "B": "2"}, "resources": {"memory": "1Gi", "cpu": "1"}},
        indent=3,
    ).replace('"same-json"', '"same\\u002djson"')
    answer = module_api.bob.post("/v1/jobs", content=again, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == first.json()["id"]
    assert _count(module_api) == before
    changed = json.dumps(body | {"priority": 1})
    assert module_api.bob.post("/v1/jobs", content=changed, headers=headers).status_code == 409


@pytest.mark.parametrize(
    "job_id", ["../../etc/passwd", "%2e%2e%2fetc%2fpasswd", "/etc/passwd", "j" + "0" * 40]
)
def test_logs_never_follow_a_path(module_api: Api, job_id: str) -> None:
    answer = module_api.admin.get(f"/v1/jobs/{job_id}/logs")
    assert answer.status_code == 404
    assert "root:" not in answer.text


def test_a_planted_symlink_log_is_not_followed(module_api: Api) -> None:
    job = module_api.bob.post("/v1/jobs", json=_body(name="victim", command=["true"])).json()
    home = module_api.svc.built.service.executor.home
    directory = home / "jobs" / job["id"]
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "task-1.out"
    link.symlink_to("/etc/passwd")
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"task": 1})
    assert answer.status_code == 404
    assert "root:" not in answer.text


def test_query_parameters_are_validated(module_api: Api) -> None:
    job = module_api.bob.post("/v1/jobs", json=_body(name="q")).json()
    for params in ({"stream": "../../x"}, {"task": -1}, {"offset": -5}, {"limit": 10**9}):
        answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params=params)
        assert answer.status_code == 422, (params, answer.text)
    assert json.loads(module_api.bob.get("/v1/jobs", params={"limit": 0}).text)["errors"]


@pytest.mark.parametrize("offset", [2**62, 2**63, 2**64, 10**30])
def test_log_offsets_beyond_any_file_are_refused(module_api: Api, offset: int) -> None:
    job = module_api.bob.post("/v1/jobs", json=_body(name="off")).json()
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"offset": offset})
    assert answer.status_code == 422, answer.text
    assert "offset" in answer.text


def test_a_log_offset_past_the_end_reads_nothing(module_api: Api) -> None:
    job = module_api.bob.post("/v1/jobs", json=_body(name="end", command=["echo", "hi"])).json()
    module_api.wait(module_api.bob, job["id"], {"succeeded"})
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"offset": 2**40})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == "" and answer.json()["offset"] == 2**40


def test_a_task_cannot_serve_a_file_by_hard_linking_it_as_its_log(module_api: Api) -> None:
    home = module_api.svc.built.service.executor.home
    secret = home.parent / "secret.txt"
    secret.write_text("the secret\n")
    secret.chmod(0o600)
    # the task's working directory is its job directory, where its logs are
    link = ["sh", "-c", f"ln {secret} task-1.out"]
    job = module_api.bob.post("/v1/jobs", json=_body(name="linker", command=link)).json()
    module_api.wait(module_api.bob, job["id"], {"succeeded"})
    assert (home / "jobs" / job["id"] / "task-1.out").stat().st_nlink == 2
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"task": 1})
    assert answer.status_code == 403, answer.text
    assert "link" in answer.text
    assert "the secret" not in answer.text


def test_a_log_of_another_owner_or_not_a_file_is_refused(module_api: Api) -> None:
    job = module_api.bob.post("/v1/jobs", json=_body(name="planted")).json()
    directory = module_api.svc.built.service.executor.home / "jobs" / job["id"]
    directory.mkdir(parents=True, exist_ok=True)
    os.mkfifo(directory / "task-2.out")  # opening it for reading would wait for a writer
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"task": 2})
    assert answer.status_code == 403, answer.text
    assert "not a regular file" in answer.text
    if os.geteuid() != 0:
        pytest.skip("planting a file of another owner needs root")
    other = directory / "task-3.out"
    other.write_text("someone else's\n")
    os.chown(other, 65534, 65534)
    answer = module_api.bob.get(f"/v1/jobs/{job['id']}/logs", params={"task": 3})
    assert answer.status_code == 403, answer.text
    assert "owner" in answer.text
