"""A federation over TLS: a `hetsched up` member that serves https and asks for a client
certificate, a federation that serves https itself, verifies the member with the CA of
members.yaml and presents its own certificate; the CLI submits to the federation over
https. A member whose certificate the federation's CA bundle does not trust is never
reached, and says why. Every certificate is made here (tests/tlscerts.py).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fed_fixtures import Fed, job_body, member_options, members_yaml
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.federation.server import FederationOptions
from hetsched.federation.spec import parse_members
from hetsched.federation.testing import running_federation
from hetsched.model.specs import SpecError
from hetsched.service.testing import running
from tlscerts import Pki, make_pki

GPU = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 1}]}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _with_tls(path: Path, **fields: Path) -> Path:
    """members.yaml with ``fields`` (ca, client_cert, client_key) on every member."""
    data = yaml.safe_load(path.read_text())
    for member in data["members"]:
        member.update({k: str(v) for k, v in fields.items()})
    path.write_text(yaml.safe_dump(data))
    return path


@contextmanager
def _tls_federation(tmp: Path, pki: Pki, trusted_ca: Path) -> Iterator[Fed]:
    """Member ``a`` over https with client certificates required, and a federation over
    https in front of it that trusts ``trusted_ca``."""
    server = {"tls_cert": pki.server_cert, "tls_key": pki.server_key}
    with ExitStack() as stack:
        member = stack.enter_context(
            running(member_options(tmp, "a", **server, tls_client_ca=pki.ca))
        )
        assert member.url.startswith("https://")
        path = members_yaml(tmp, {"a": member.url}, {"a": member.admin_token})
        mine = {"client_cert": pki.client_cert, "client_key": pki.client_key}
        _with_tls(path, ca=trusted_ca, **mine)
        options = FederationOptions(members=path, home=tmp / "federation", rate_limit=0.0, **server)
        fed = stack.enter_context(running_federation(options))
        assert fed.url.startswith("https://")
        client = stack.enter_context(
            httpx.Client(
                base_url=fed.url,
                headers={"Authorization": f"Bearer {fed.admin_token}"},
                timeout=30,
                verify=ssl.create_default_context(cafile=str(pki.ca)),
            )
        )
        yield Fed(fed, client, {"a": member})


def test_a_job_goes_through_an_https_federation_to_an_https_member(
    tmp_path: Path, pki: Pki
) -> None:
    with _tls_federation(tmp_path, pki, pki.ca) as fed:
        fed.ready()
        body = job_body(command=["sh", "-c", "echo over tls on $HETSCHED_NODE"], resources=GPU)
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
        env = {
            "HETSCHED_URL": fed.running.url,
            "HETSCHED_TOKEN": fed.running.admin_token,
            "HETSCHED_CA": str(pki.ca),
        }
        result = CliRunner().invoke(
            app, ["submit", "-o", "json", str(tmp_path / "job.yaml")], env=env
        )
        assert result.exit_code == 0, result.stdout + result.stderr
        (job,) = yaml.safe_load(result.stdout)
        done = fed.until(job["id"], {"succeeded", "failed"})
        assert done["state"] == "succeeded", done
        log = fed.client.get(f"/v1/jobs/{job['id']}/logs").json()
        assert "over tls on a-node" in log["data"]


def test_a_member_whose_certificate_is_not_trusted_is_never_reached_and_says_why(
    tmp_path: Path, pki: Pki
) -> None:
    with _tls_federation(tmp_path, pki, pki.other_ca) as fed:
        state = fed.running.built.runner.members["a"]
        reason = "not signed by a CA in the CA bundle"
        fed.wait("the member's reason", lambda: reason in state.why, timeout=20)
        assert state.status != "ready" and state.heard is None, state
        assert state.why.startswith(f"no answer: a: TLS: {fed.members['a'].url} refused: its")


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"ca": "{ca}", "url": "http://127.0.0.1:1"}, "ca and client_cert are for an https:// url"),
        ({"client_cert": "{client_cert}"}, "give both client_cert and client_key, or neither"),
        ({"ca": "{missing}"}, "members[0].ca: cannot read {missing}"),
        (
            {"client_cert": "{client_cert}", "client_key": "{server_key}"},
            "members[0].client_key: {server_key} is not the key of {client_cert}",
        ),
    ],
)
def test_members_yaml_names_the_tls_field_at_fault(
    tmp_path: Path, pki: Pki, fields: dict[str, str], error: str
) -> None:
    names = {**pki.__dict__, "missing": tmp_path / "missing.pem"}
    token = tmp_path / "a.token"
    token.write_text("t")
    member: dict[str, Any] = {
        "name": "a",
        "kind": "hetsched",
        "url": "https://127.0.0.1:1",
        "token_file": str(token),
    }
    member.update({k: v.format(**names) for k, v in fields.items()})
    with pytest.raises(SpecError) as caught:
        parse_members({"federation": "f", "members": [member]})
    assert error.format(**names) in str(caught.value)
