"""``hetsched k8s extender --tls-cert --tls-key [--tls-client-ca]`` as a real process: the
webhook over https as kube-scheduler calls it with ``enableHTTPS`` (the CA in
``tlsConfig.caData``, a client certificate in ``certData``/``keyData``), a client without
a certificate or with the wrong CA refused, and a bad key refused at start in one line.
Every certificate is made here (tests/tlscerts.py).
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetsched.controlplane import free_port
from tlscerts import Pki, make_pki

FIXTURES = Path(__file__).parent / "fixtures"
HETSCHED = str(Path(sys.executable).parent / "hetsched")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def _filter(url: str, verify: ssl.SSLContext) -> Any:
    body = json.loads((FIXTURES / "filter-nodes.json").read_text())
    return httpx.post(f"{url}/filter", json=body, timeout=5, verify=verify)


@contextmanager
def _extender(pki: Pki, *extra: str) -> Iterator[str]:
    port = free_port()
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    command = [HETSCHED, "k8s", "extender", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--no-watch", *tls, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        probe = _context(pki.ca, pki.client_cert, pki.client_key)
        while True:
            try:
                _filter(url, probe)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[0]
                assert time.monotonic() < deadline, "the extender did not start"
                time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


def test_the_extender_serves_filter_over_https(pki: Pki) -> None:
    with _extender(pki) as url:
        answer = _filter(url, _context(pki.ca))
        assert answer.status_code == 200
        assert [n["metadata"]["name"] for n in answer.json()["Nodes"]["items"]] == ["gpu-a"]
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            _filter(url, _context(pki.other_ca))


def test_with_a_client_ca_only_clients_with_its_certificates_are_served(pki: Pki) -> None:
    with _extender(pki, "--tls-client-ca", str(pki.ca)) as url:
        answer = _filter(url, _context(pki.ca, pki.client_cert, pki.client_key))
        assert answer.status_code == 200
        for verify in (_context(pki.ca), _context(pki.ca, pki.stranger_cert, pki.stranger_key)):
            with pytest.raises(httpx.TransportError):
                _filter(url, verify)


def test_a_key_of_another_certificate_is_refused_at_start(pki: Pki) -> None:
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.client_key)]
    command = [HETSCHED, "k8s", "extender", "--port", str(free_port()), "--no-watch", *tls]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    message = f"--tls-key: {pki.client_key} is not the key of {pki.server_cert}"
    assert message in " ".join(done.stderr.split()), done.stderr
