"""Dependencies and arrays through the API: names resolved at submission, cycles and
unknown names refused, held jobs explained, array elements run with their index."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from service_fixtures import Api, job_body


def _submit(api: Api, bodies: list[dict[str, object]]) -> list[str]:
    answer = api.alice.post("/v1/jobs/batch", json={"jobs": bodies})
    assert answer.status_code == 201, answer.text
    return [row["id"] for row in answer.json()["jobs"]]


def test_a_diamond_runs_in_order_and_names_resolve_to_ids(api: Api, tmp_path: Path) -> None:
    log = tmp_path / "order.log"

    def step(name: str, after: list[object]) -> dict[str, object]:
        return job_body(name=name, after=after, command=["sh", "-c", f"echo {name} >> {log}"])

    ids = _submit(
        api,
        [step("d", ["b", "c"]), step("b", ["a"]), step("c", ["a"]), step("a", [])],
    )
    d, b, c, _a = ids
    job = api.wait(api.alice, d, {"succeeded", "failed", "cancelled"})
    assert job["state"] == "succeeded"
    assert job["after"] == [{"job": b, "state": "succeeded"}, {"job": c, "state": "succeeded"}]
    order = log.read_text().split()
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"]
    history = api.alice.get(f"/v1/jobs/{d}/why").json()["history"]
    assert history[-3]["cause"] == "dependencies met: b succeeded, c succeeded"


def test_a_cycle_and_an_unknown_name_are_refused(api: Api) -> None:
    cyc = [job_body(name="x", after=["y"]), job_body(name="y", after=["x"])]
    answer = api.alice.post("/v1/jobs/batch", json={"jobs": cyc})
    assert answer.status_code == 422
    assert "dependency cycle: x -> y -> x" in answer.text
    answer = api.alice.post("/v1/jobs", json=job_body(after=["nobody"]))
    assert answer.status_code == 422
    assert "after[0]: no job named 'nobody'" in answer.text
    assert api.alice.get("/v1/jobs", params={"all": True}).json() == []


def test_a_failure_cancels_the_dependent_with_the_reason(api: Api) -> None:
    first = api.alice.post("/v1/jobs", json=job_body(name="etl", command=["false"])).json()
    second = api.alice.post("/v1/jobs", json=job_body(name="train", after=["etl"])).json()
    job = api.wait(api.alice, second["id"], {"cancelled", "succeeded"})
    assert job["state"] == "cancelled" and job["reason"] == "etl failed"
    assert job["after"] == [{"job": first["id"], "state": "succeeded"}]
    # a job whose dependency has already failed could never start: refused
    answer = api.alice.post("/v1/jobs", json=job_body(name="again", after=["etl"]))
    assert answer.status_code == 422 and "it could never start" in answer.text


def test_an_array_runs_each_index_once_with_its_environment(api: Api, tmp_path: Path) -> None:
    out = tmp_path / "indexes"
    out.mkdir()
    script = f'echo "$HETSCHED_ARRAY_SIZE" > {out}/"$HETSCHED_ARRAY_INDEX"'
    body = job_body(name="sweep", array="1-9:2%2", command=["sh", "-c", script])
    array_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    job = api.wait(api.alice, array_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded", job
    assert sorted(int(p.name) for p in out.iterdir()) == [1, 3, 5, 7, 9]
    assert {p.read_text().strip() for p in out.iterdir()} == {"5"}
    assert job["elements"]["counts"] == {"succeeded": 5}
    element = api.alice.get(f"/v1/jobs/{array_id}[3]").json()
    assert element["array_of"] == array_id and element["array_index"] == 3


def test_why_says_how_far_the_awaited_job_got_and_cancel_reaches_one_element(
    api: Api, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    script = f'test "$HETSCHED_TASK_INDEX" = 0 || until test -e {stop}; do sleep 0.05; done'
    etl = job_body(name="etl-2", replicas=3, gang=1, command=["sh", "-c", script])
    assert api.alice.post("/v1/jobs", json=etl).status_code == 201
    train = api.alice.post("/v1/jobs", json=job_body(name="train", after=["etl-2"])).json()["id"]
    deadline = 50
    while deadline:
        why = api.alice.get(f"/v1/jobs/{train}/why").json()
        if (why["explanation"] or {}).get("summary") == "waiting for etl-2 (running, 1 of 3 done)":
            break
        deadline -= 1
        time.sleep(0.1)
    assert why["state"] == "pending", why
    assert why["explanation"]["summary"] == "waiting for etl-2 (running, 1 of 3 done)"
    # an element not created yet (the cap holds it back) is cancelled alone
    body = job_body(
        name="sweep",
        array="0-3%1",
        command=["sh", "-c", f"until test -e {stop}; do sleep 0.05; done"],
    )
    sweep = api.alice.post("/v1/jobs", json=body).json()["id"]
    assert api.alice.post(f"/v1/jobs/{sweep}[2]/cancel").status_code == 202
    stop.touch()
    assert api.wait(api.alice, train, {"succeeded"})["state"] == "succeeded"
    job = api.wait(api.alice, sweep, {"succeeded", "failed"})
    assert job["state"] == "failed" and job["elements"]["unsuccessful"] == [2]
    assert job["elements"]["counts"] == {"succeeded": 3, "cancelled": 1}
    assert api.alice.post(f"/v1/jobs/{sweep}[9]/cancel").status_code == 404


def test_a_job_may_not_set_the_array_variables_itself(api: Api) -> None:
    body = job_body(env={"HETSCHED_ARRAY_INDEX": "3"})
    answer = api.alice.post("/v1/jobs", json=body)
    assert answer.status_code == 422
    assert "env: 'HETSCHED_ARRAY_INDEX' may not be set by a job" in answer.text


def test_a_name_resolves_in_the_submission_first_then_to_the_callers_latest_job(
    api: Api,
) -> None:
    def post(client: httpx.Client, **body: object) -> str:
        answer = client.post("/v1/jobs", json=job_body(**body))
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    older = post(api.alice, name="etl", command=["sleep", "30"])
    newer = post(api.alice, name="etl", command=["sleep", "30"])
    bobs = post(api.bob, name="etl", command=["sleep", "30"])
    # alice's latest etl, never bob's (newer than both of hers)
    train = post(api.alice, name="train", after=["etl"])
    assert api.alice.get(f"/v1/jobs/{train}").json()["after"] == [
        {"job": newer, "state": "succeeded"}
    ]
    # an id names that job, however old
    again = post(api.alice, name="again", after=[older])
    assert api.alice.get(f"/v1/jobs/{again}").json()["after"][0]["job"] == older
    # bob's job is not alice's to wait for, by name or by id
    answer = api.alice.post("/v1/jobs", json=job_body(after=[bobs]))
    assert answer.status_code == 422
    assert f"after[0]: no job named '{bobs}'" in answer.text
    # an etl of the same submission wins over every stored one
    ids = _submit(api, [job_body(name="report", after=["etl"]), job_body(name="etl")])
    row = api.alice.get(f"/v1/jobs/{ids[0]}").json()
    assert row["after"] == [{"job": ids[1], "state": "succeeded"}]
    for job_id in (older, newer, train, again, *ids):
        api.alice.post(f"/v1/jobs/{job_id}/cancel")
    api.bob.post(f"/v1/jobs/{bobs}/cancel")


def test_a_dependency_on_an_element_never_created_ends_with_its_array(
    api: Api, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    wait = ["sh", "-c", f"until test -e {stop}; do sleep 0.05; done"]
    sweep = api.alice.post("/v1/jobs", json=job_body(name="sweep", array="0-9%1", command=wait))
    array = sweep.json()["id"]
    answer = api.alice.post("/v1/jobs", json=job_body(after=[f"{array}[10]"]))
    assert answer.status_code == 422
    assert f"after[0]: '{array}[10]': the array has no index 10 (0-9%1)" in answer.text
    needs = api.alice.post("/v1/jobs", json=job_body(name="n5", after=[f"{array}[5]"]))
    ended = {"job": f"{array}[5]", "state": "ended"}
    anyway = api.alice.post("/v1/jobs", json=job_body(name="e5", after=[ended]))
    n5, e5 = needs.json()["id"], anyway.json()["id"]
    for _ in range(50):  # until the loop has taken it
        why = api.alice.get(f"/v1/jobs/{n5}/why").json()
        if why["explanation"]:
            break
        time.sleep(0.1)
    assert why["explanation"]["summary"] == "waiting for sweep[5] (not created yet)"
    assert api.alice.post(f"/v1/jobs/{array}/cancel").status_code == 202
    job = api.wait(api.alice, n5, {"cancelled", "succeeded"})
    assert (job["state"], job["reason"]) == ("cancelled", "sweep[5] cancelled")
    assert api.wait(api.alice, e5, {"cancelled", "succeeded"})["state"] == "succeeded"
    # an array that has ended, which nothing waited for: gone[2] never will exist
    body = job_body(name="gone", array="0-3%1", command=wait)
    gone = api.alice.post("/v1/jobs", json=body).json()["id"]
    assert api.alice.post(f"/v1/jobs/{gone}/cancel").status_code == 202
    api.wait(api.alice, gone, {"cancelled"})
    answer = api.alice.post("/v1/jobs", json=job_body(after=[f"{gone}[2]"]))
    assert answer.status_code == 422
    assert f"{gone}[2] cancelled, it needs succeeded: it could never start" in answer.text
    late = api.alice.post("/v1/jobs", json=job_body(after=[{**ended, "job": f"{gone}[2]"}]))
    assert api.wait(api.alice, late.json()["id"], {"cancelled", "succeeded"})["state"] == (
        "succeeded"
    )
    stop.touch()
