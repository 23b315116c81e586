"""Body of the TLS test on Ray: `hetsched up --executor ray` serving https, its tasks on the
Ray nodes told the https ``--advertise-url`` and the CA as PEM text, reporting a checkpoint
through the API with ``hetsched checkpoint``."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from ray_service import HETSCHED, free_port

from hetsched.ray.testing import ClusterInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tlscerts
from tlscerts import make_pki

SCRIPT = (
    'echo "api=$HETSCHED_API node=$HETSCHED_NODE pem=${HETSCHED_CA_PEM:+yes}"; '
    "HETSCHED checkpoint --step 5 --path /saved/5"
)


def _wait_up(url: str, verify: ssl.SSLContext, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, f"hetsched up exited {process.returncode}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2, verify=verify).status_code == 200:
                return
        assert time.monotonic() < deadline, "hetsched up did not answer"
        time.sleep(0.2)


def checkpoint_over_https(cluster: ClusterInfo) -> dict[str, Any]:
    scratch = Path(cluster.scratch)
    pki = make_pki(scratch / "pki")
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    home = scratch / "home-tls"
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    advertise = ["--advertise-url", url, "--advertise-ca", str(pki.ca)]
    ray = ["--executor", "ray", "--ray-address", cluster.address, "--kill-grace", "2"]
    argv = [HETSCHED, "up", "--home", str(home), "--port", str(port), *ray, *tls, *advertise]
    with (scratch / "up-tls.log").open("ab") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    verify = ssl.create_default_context(cafile=str(pki.ca))
    try:
        _wait_up(url, verify, process)
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, verify=verify, timeout=30) as client:
            body = {
                "name": "saves",
                "command": [
                    "sh",
                    "-c",
                    SCRIPT.replace("HETSCHED checkpoint", f"{HETSCHED} checkpoint"),
                ],
                "resources": {"cpu": "1"},
            }
            answer = client.post("/v1/jobs", json=body)
            assert answer.status_code == 201, answer.text
            job_id = answer.json()["id"]
            deadline = time.monotonic() + 120
            while (job := client.get(f"/v1/jobs/{job_id}").json())["state"] not in {
                "succeeded",
                "failed",
            }:
                assert time.monotonic() < deadline, job
                time.sleep(0.2)
            log = client.get(f"/v1/jobs/{job_id}/logs").json()["data"]
        return {"url": url, "job": job, "log": log}
    finally:
        process.terminate()
        process.wait(timeout=60)
