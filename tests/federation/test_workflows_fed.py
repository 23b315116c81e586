"""Dependencies and arrays through a federation, against three real `hetsched up` members:
the federation holds what waits, creates the elements, and sends each element to a member as
a job of its own, told its index and the array's size."""

from __future__ import annotations

from pathlib import Path

from fed_fixtures import federation, job_body

GPU = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 1}]}


def test_an_array_and_a_dependent_run_through_the_federation(tmp_path: Path) -> None:
    with federation(tmp_path) as fed:
        fed.ready()
        script = 'echo "index $HETSCHED_ARRAY_INDEX of $HETSCHED_ARRAY_SIZE"'
        body = job_body(name="sweep", array="0-2", command=["sh", "-c", script], resources=GPU)
        sweep = fed.client.post("/v1/jobs", json=body).json()["id"]
        after = job_body(name="report", after=["sweep"], command=["true"], resources=GPU)
        answer = fed.client.post("/v1/jobs", json=after)
        assert answer.status_code == 201, answer.text
        report = fed.until(answer.json()["id"], {"succeeded", "failed", "cancelled"})
        assert report["state"] == "succeeded", report
        array = fed.until(sweep, {"succeeded", "failed"})
        assert array["elements"]["counts"] == {"succeeded": 3}
        for index in range(3):
            log = fed.client.get(f"/v1/jobs/{sweep}[{index}]/logs").json()
            assert f"index {index} of 3" in log["data"]
