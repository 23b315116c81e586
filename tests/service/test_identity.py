"""One user-name rule for jobs and tokens, and admin as a role, not a name."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from service_fixtures import Api, job_body
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.controlplane.api.token_routes import TokenRequest
from hetsched.controlplane.schemas import SubmitSpec, from_stored

#: names no token can be issued for
UNUSABLE = ["zoë", "用户", "../root", "x" * 300, "-lead", ""]


@pytest.mark.parametrize("name", UNUSABLE)
def test_no_job_is_accepted_for_a_user_no_token_can_be_issued_for(api: Api, name: str) -> None:
    answer = api.admin.post("/v1/tokens", json={"user": name})
    assert answer.status_code == 422, answer.text
    assert "must be 1-63 characters" in answer.text
    answer = api.admin.post("/v1/jobs", json=job_body(user=name))
    assert answer.status_code == 422, answer.text
    errors = answer.json()["detail"]["errors"]
    assert any(e.startswith("user: must be 1-63 characters") for e in errors), errors
    answer = api.admin.post("/v1/jobs/batch", json={"jobs": [job_body(), job_body(user=name)]})
    assert answer.status_code == 422, answer.text
    errors = answer.json()["detail"]["errors"]
    assert any(e.startswith("jobs[1].user: must be 1-63") for e in errors), errors


_names = st.one_of(
    st.text(max_size=70),
    st.text(alphabet="abcXYZ019._-ë/", min_size=1, max_size=70),
)


@settings(max_examples=300, deadline=None)
@given(_names)
def test_a_name_is_a_tokens_exactly_when_it_is_a_jobs(name: str) -> None:
    def accepted(model: type, data: dict[str, object]) -> bool:
        try:
            model.model_validate(data)  # type: ignore[attr-defined]
        except ValidationError:
            return False
        return True

    token_ok = accepted(TokenRequest, {"user": name})
    job_ok = accepted(SubmitSpec, {**job_body(), "user": name})
    assert token_ok == job_ok


def test_a_stored_job_of_an_earlier_rule_still_loads() -> None:
    """Recovery reads what was accepted once: a name from before the rule is kept."""
    spec = from_stored({**job_body(), "user": "zoë"})
    assert spec.user == "zoë"


def test_admin_is_a_role_not_a_name(api: Api) -> None:
    mine = api.admin.post("/v1/jobs", json=job_body(name="admins-own")).json()["id"]
    # the built-in admin's name takes no user token: it would read the admin's own jobs
    answer = api.admin.post("/v1/tokens", json={"user": "admin"})
    assert answer.status_code == 409 and "admin's name" in answer.text
    # the same for any name an admin token was issued for, revoked or not
    root = api.admin.post("/v1/tokens", json={"user": "root", "admin": True}).json()
    api.admin.delete(f"/v1/tokens/{root['id']}")
    assert api.admin.post("/v1/tokens", json={"user": "root"}).status_code == 409
    # an admin token for such a name is fine, and a user's name may become an admin's
    assert api.admin.post("/v1/tokens", json={"user": "admin", "admin": True}).status_code == 201
    assert api.admin.post("/v1/tokens", json={"user": "alice", "admin": True}).status_code == 201
    # a user never reads another's jobs by sharing a name with an admin: none can
    listed = api.alice.get("/v1/jobs").json()
    assert mine not in {j["id"] for j in listed}


def test_check_holds_a_jobs_user_to_the_same_rule(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, user: ../root, resources: {cpu: 1}, command: ['true']}\n")
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert "jobs[0].user: must be 1-63 characters" in result.output
