"""TLS end to end: ``hetsched up --tls-cert --tls-key`` as a real process, the CLI verifying
it with a CA bundle, a task reporting a checkpoint over https with the CA it was given,
client certificates, and the refusals (a CA that did not sign the server's certificate, an
expired certificate, a server that asks for a client certificate) as one clear line.

Every certificate is made here (tests/tlscerts.py); nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.controlplane import serve
from hetsched.service.testing import ServerProcess
from hetsched.tls import ServerTls
from tlscerts import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def _server(tmp_path: Path, pki: Pki, *extra: str, verify: ssl.SSLContext) -> ServerProcess:
    args = ["--node-name", "tls-node", "--kill-grace", "1"]
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    return ServerProcess(tmp_path / "home", [*args, *tls, *extra], verify=verify)


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    """``hetsched up`` over https, telling its tasks the CA to verify it with."""
    tmp = tmp_path_factory.mktemp("https")
    server = _server(tmp, pki, "--advertise-ca", str(pki.ca), verify=_context(pki.ca))
    server.start()
    try:
        yield server
    finally:
        server.kill_tasks()
        server.stop()


def _cli(args: list[str], **env: str | None) -> tuple[int, str]:
    # every variable the CLI reads is named, so none leaks from one call to the next
    names = ("HETSCHED_CA", "HETSCHED_CA_PEM", "HETSCHED_CLIENT_CERT", "HETSCHED_CLIENT_KEY")
    full: dict[str, str | None] = {**dict.fromkeys(names), **env}
    result = CliRunner().invoke(app, args, env=full)
    return result.exit_code, result.stdout + result.stderr


def _until_done(client: httpx.Client, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in {"succeeded", "failed", "cancelled"}:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


def test_the_cli_lists_jobs_over_https_with_the_ca_bundle(https: ServerProcess, pki: Pki) -> None:
    env = {"HETSCHED_URL": https.url, "HETSCHED_TOKEN": https.token}
    code, out = _cli(["jobs", "-o", "json"], HETSCHED_CA=str(pki.ca), **env)
    assert code == 0, out
    code, out = _cli(["--cacert", str(pki.ca), "nodes", "-o", "json"], **env)
    assert code == 0 and "tls-node" in out, out


@pytest.mark.parametrize("ca", ["other", "system"])
def test_a_ca_that_did_not_sign_the_server_is_one_clear_line(
    https: ServerProcess, pki: Pki, ca: str
) -> None:
    env = {"HETSCHED_URL": https.url, "HETSCHED_TOKEN": https.token}
    args = ["--cacert", str(pki.other_ca)] if ca == "other" else []
    code, out = _cli([*args, "jobs"], **env)
    assert code == 1, out
    assert "Traceback" not in out
    assert f"TLS: {https.url} refused: its certificate is not signed by a CA in the CA bundle" in (
        " ".join(out.split())
    )
    assert "--cacert" in out


def test_plain_http_to_the_https_port_says_to_use_https(https: ServerProcess) -> None:
    plain = https.url.replace("https://", "http://")
    code, out = _cli(["jobs"], HETSCHED_URL=plain, HETSCHED_TOKEN=https.token)
    assert code == 1 and "Traceback" not in out
    assert "if it serves TLS, use an https:// URL" in " ".join(out.split())


def test_a_task_reports_a_checkpoint_over_https_with_the_ca_it_was_given(
    https: ServerProcess,
) -> None:
    script = 'echo "api=$HETSCHED_API"; hetsched checkpoint --step 7 --path /saved/7'
    body = {"name": "saves", "command": ["sh", "-c", script], "resources": {"cpu": "1"}}
    with https.client() as client:
        answer = client.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        job = _until_done(client, answer.json()["id"])
        log = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
    assert job["state"] == "succeeded", (job, log)
    assert f"api={https.url}" in log
    assert "checkpoint reported: step 7, /saved/7" in log
    assert job["checkpoint"]["step"] == 7


def test_a_client_certificate_is_required_with_tls_client_ca(tmp_path: Path, pki: Pki) -> None:
    verify = _context(pki.ca, pki.client_cert, pki.client_key)
    server = _server(tmp_path, pki, "--tls-client-ca", str(pki.ca), verify=verify)
    server.start()
    try:
        env = {"HETSCHED_URL": server.url, "HETSCHED_TOKEN": server.token}
        ca = {"HETSCHED_CA": str(pki.ca)}
        code, out = _cli(["jobs"], **env, **ca)
        assert code == 1 and "Traceback" not in out
        assert "it may require a client certificate" in " ".join(out.split())
        stranger = ["--client-cert", str(pki.stranger_cert), "--client-key", str(pki.stranger_key)]
        code, out = _cli([*stranger, "jobs"], **env, **ca)
        assert code == 1 and "Traceback" not in out, out
        mine = ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
        code, out = _cli([*mine, "jobs", "-o", "json"], **env, **ca)
        assert code == 0, out
    finally:
        server.stop()


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"[]"})


def test_an_expired_server_certificate_is_refused_by_the_cli(pki: Pki) -> None:
    # served without the start-up check, as a server whose certificate expired while it ran
    server, thread, port = serve(_ok, ServerTls(pki.expired_cert, pki.expired_key))
    try:
        url = f"https://127.0.0.1:{port}"
        code, out = _cli(["jobs"], HETSCHED_URL=url, HETSCHED_TOKEN="t", HETSCHED_CA=str(pki.ca))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert code == 1 and "Traceback" not in out
    assert f"TLS: {url} refused: its certificate has expired" in " ".join(out.split())


def test_up_refuses_an_expired_certificate_at_start(tmp_path: Path, pki: Pki) -> None:
    args = ["up", "--home", str(tmp_path / "home"), "--tls-cert", str(pki.expired_cert)]
    code, out = _cli([*args, "--tls-key", str(pki.expired_key)])
    assert code == 2 and "Traceback" not in out
    assert f"--tls-cert: {pki.expired_cert} expired on" in " ".join(out.split())
    assert not (tmp_path / "home").exists()  # nothing was started


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "{server_cert}"], "--tls-cert needs --tls-key"),
        (["--tls-client-ca", "{ca}"], "--tls-client-ca needs --tls-cert and --tls-key"),
        (
            ["--tls-cert", "{server_cert}", "--tls-key", "{client_key}"],
            "--tls-key: {client_key} is not the key of {server_cert}",
        ),
        (
            ["--tls-cert", "{server_cert}", "--tls-key", "{server_key}", "--tls-client-ca", "{x}"],
            "--tls-client-ca: cannot read {x}",
        ),
        (
            ["--tls-cert", "{server_cert}", "--tls-key", "{server_key}", "--advertise-url", "a:b"],
            "--advertise-url: expected an http:// or https:// URL, got 'a:b'",
        ),
    ],
)
def test_up_names_the_tls_option_at_fault(
    tmp_path: Path, pki: Pki, args: list[str], message: str
) -> None:
    names = {**pki.__dict__, "x": tmp_path / "missing.pem"}
    filled = [arg.format(**names) for arg in args]
    code, out = _cli(["up", "--home", str(tmp_path / "home"), *filled])
    assert code == 2 and "Traceback" not in out, out
    assert message.format(**names) in " ".join(out.split())
