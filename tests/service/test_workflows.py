"""Dependencies and arrays through the API: names resolved at submission, cycles and
unknown names refused, held jobs explained, array elements run with their index."""

from __future__ import annotations

from pathlib import Path

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
