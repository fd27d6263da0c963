"""Credentials masked by default: every URL the factory prints or logs loses its user part,
its query values and its fragment unless their key is known to be harmless, and the value of
every secret of the environment is masked wherever it stands (a hostile setup.py printing its
environment, a registry echoing a password)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from factory.system.process import Log
from factory.trust.credentials import credential_in, mask_url, redact

from ..support.factory import factory_main, write

SECRET = "s3cretVALUE42"

# (text holding SECRET, what must still be there once masked)
URLS = [
    (f"https://me:{SECRET}@example.com/simple/", "https://***@example.com/simple/"),
    (f"https://{SECRET}@example.com/k.git", "https://***@example.com/k.git"),
    (f"https://oauth2:{SECRET}@gitlab.example.com/g/k.git", "https://***@gitlab.example.com/"),
    (f"https://me:p@ss{SECRET}@example.com/x", "https://***@example.com/x"),
    (f"s3://AKIA:{SECRET}@bucket/prefix", "s3://***@bucket/prefix"),
    (f"hf://user:{SECRET}@org/kernel", "hf://***@org/kernel"),
    (f"https://example.com/simple/?token={SECRET}", "https://example.com/simple/?token=***"),
    (f"https://example.com/x?private_token={SECRET}", "?private_token=***"),
    (f"https://example.com/x?auth_token={SECRET}", "?auth_token=***"),
    (f"https://example.com/x?api_token={SECRET}", "?api_token=***"),
    (f"https://example.com/x?hf_token={SECRET}", "?hf_token=***"),
    (f"https://example.com/x?jwt={SECRET}", "?jwt=***"),
    (f"https://example.com/x?refresh_token={SECRET}", "?refresh_token=***"),
    (f"https://example.com/x?X-Amz-Signature={SECRET}&X-Amz-Date=1", "X-Amz-Date=***"),
    (f"https://example.com/x?rev=main&code={SECRET}", "?rev=main&code=***"),
    (f"https://example.com/x?a=1;b={SECRET}", "?a=***;b=***"),
    (f"https://example.com/x?{SECRET}", "https://example.com/x?***"),
    (f"https://example.com/x#{SECRET}", "https://example.com/x#***"),
    (f"https://example.com/x#access_token={SECRET}&state=1", "#access_token=***&state=***"),
    (f"https://example.com/a.whl#sha256=ab12&x={SECRET}", "#sha256=ab12&x=***"),
    (f"see https://example.com/p?jwt={SECRET}, then retry", "?jwt=***, then retry"),
    (f"(https://u:{SECRET}@example.com/x)", "(https://***@example.com/x)"),
    (f"'https://u:{SECRET}@example.com/x'", "'https://***@example.com/x'"),
    (f"url=\"https://example.com/x?sig={SECRET}\"", '"https://example.com/x?sig=***"'),
    (f"HTTP 500: <pre>https://example.com/upload?password={SECRET}</pre>", "password=***"),
    (f"?token={SECRET} outside a URL", "?token=*** outside a URL"),
    (f"git+https://u:{SECRET}@example.com/k.git@v1", "git+https://***@example.com/k.git@v1"),
    (f"ssh://deploy:{SECRET}@example.com:22/k.git", "ssh://***@example.com:22/k.git"),
    (f"cannot reach ghp_{SECRET}0123456789abcdef@github.com:org/k.git: fatal",
     "cannot reach ***@github.com:org/k.git: fatal"),
]


@pytest.mark.parametrize(("text", "kept"), URLS, ids=[f"url{n}" for n in range(len(URLS))])
def test_every_url_credential_is_masked_by_default(text: Any, kept: Any) -> None:
    masked = redact(text, {})
    assert SECRET not in masked and kept in masked


@pytest.mark.parametrize("url", [
    "https://example.com/simple/", "ssh://git@github.com/org/k.git",
    "https://example.com/k.git?rev=v1.0&subdirectory=relu",
    "https://files.example.com/img2gray-1.0.0-cp39-abi3-linux_x86_64.whl#sha256=0a1b2c",
    "https://download.pytorch.org/whl/cu130", "file:///srv/mirrors/cutlass"])
def test_what_says_where_and_what_is_kept(url: str) -> None:
    assert mask_url(url) == url == redact(url, {})


def test_the_environments_secrets_are_masked_wherever_they_stand() -> None:
    environ = {"TWINE_PASSWORD": "hunter2-pypi", "HF_TOKEN": "hf_abcdef123456",
               "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "GITHUB_TOKEN": "ghp_0123456789",
               "MY_API_KEY": "k-987654321", "SHORT_TOKEN": "1", "PATH": "/usr/bin"}
    text = ("env: TWINE_PASSWORD=hunter2-pypi HF_TOKEN=hf_abcdef123456 "
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG ghp_0123456789 k-987654321 PATH=/usr/bin "
            "SHORT_TOKEN=1")
    masked = redact(text, environ)
    for name, value in environ.items():
        if name not in ("PATH", "SHORT_TOKEN"):
            assert value not in masked
    assert "PATH=/usr/bin" in masked and "SHORT_TOKEN=1" in masked  # too short to mask


@pytest.mark.parametrize(("url", "said"), [
    ("https://example.com/x?private_token=a", "a 'private_token' query parameter, which may be "
                                              "a secret"),
    ("https://example.com/x?jwt=a", "a 'jwt' query parameter, which may be a secret"),
    ("https://example.com/x#a1b2", "a fragment, which may be a secret"),
    ("https://me:p@ss@example.com/x", "a password"),
    ("https://example.com/x?rev=main", None),
    ("https://example.com/a.whl#sha256=ab", None),
])
def test_a_url_given_as_input_with_anything_that_may_be_a_secret_is_refused(url: str,
        said: str | None) -> None:
    assert credential_in(url) == said


def test_a_cells_log_never_holds_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_PASSWORD", SECRET)
    handle = io.StringIO()
    Log(handle).write(f"setup.py: os.environ={{'TWINE_PASSWORD': '{SECRET}'}} "
                      f"fetching https://u:{SECRET}@example.com/dep.tar.gz")
    assert SECRET not in handle.getvalue() and "https://***@example.com/dep.tar.gz" in \
        handle.getvalue()


def test_nothing_the_command_prints_holds_a_secret(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: nowhere-{SECRET}, version: 1.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    result = factory_main("plan", matrix, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert result.exit == 2 and "nowhere-***" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_librarys_warning_is_masked_too(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The Hub client logs its retries with the URL it asked (HF_ENDPOINT with a password)."""
    factory_main("plan", tmp_path / "missing.yaml", capsys=capsys)  # sets up the masking
    logging.getLogger("huggingface_hub.utils._http").warning(
        "Retrying in 1s [Retry 1/5]: https://u:%s@hub.example.com/api", SECRET)
    captured = capsys.readouterr()
    assert SECRET not in captured.err and "https://***@hub.example.com/api" in captured.err


def test_a_librarys_own_handler_prints_it_masked(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface_hub prints its log lines through a handler of its own; one whose stream
    fails has logging report the record, arguments included: neither shows the password."""
    factory_main("plan", tmp_path / "missing.yaml", capsys=capsys)
    logger = logging.getLogger("kwf-tests.library")
    own, broken = io.StringIO(), io.StringIO()
    broken.close()
    handlers = [logging.StreamHandler(own), logging.StreamHandler(broken)]
    for handler in handlers:
        logger.addHandler(handler)
    try:
        logger.warning("Retrying in 1s [Retry 1/5]: https://u:%s@hub.example.com/api", SECRET)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
    printed = own.getvalue() + capsys.readouterr().err
    assert own.getvalue() == "Retrying in 1s [Retry 1/5]: https://***@hub.example.com/api\n"
    assert "--- Logging error ---" in printed and SECRET not in printed


def test_the_provenance_names_build_variables_but_records_no_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel's env: may hold a token; the wheel's provenance keeps its name and a hash, and
    `factory verify` takes the value from its own environment, checked against the hash."""
    from factory.cells.records import _without_values
    from factory.cells.verify import _with_env_values

    cell = {"id": "relu-scale/cu130torch211/x86_64", "env": {"PRIVATE_MIRROR_TOKEN": SECRET,
                                                              "FORCE_BUILD": "TRUE"}}
    recorded = _without_values(cell)
    assert SECRET not in json.dumps(recorded) and "TRUE" not in json.dumps(recorded)
    assert set(recorded["env"]) == {"PRIVATE_MIRROR_TOKEN", "FORCE_BUILD"}
    monkeypatch.delenv("PRIVATE_MIRROR_TOKEN", raising=False)
    monkeypatch.setenv("FORCE_BUILD", "TRUE")
    _, problem = _with_env_values(recorded)
    assert problem is not None and problem.startswith(
        "the wheel was built with PRIVATE_MIRROR_TOKEN set") and SECRET not in problem
    monkeypatch.setenv("PRIVATE_MIRROR_TOKEN", "another")
    assert "has another value here" in str(_with_env_values(recorded)[1])
    monkeypatch.setenv("PRIVATE_MIRROR_TOKEN", SECRET)
    again, problem = _with_env_values(recorded)
    assert problem is None and again["env"] == cell["env"]


def test_ssh_s_plain_login_in_an_scp_like_url_is_kept_and_a_token_is_not() -> None:
    assert redact("git@github.com:org/k.git failed", {}) == "git@github.com:org/k.git failed"
    assert redact("mail a@b.c", {}) == "mail a@b.c"
    assert credential_in("git@github.com:org/k.git") is None
    assert credential_in(f"ghp_{SECRET}0123456789abcdef@github.com:org/k.git") == \
        "a token in its user part"
    # a password in an scp-like address is masked and refused like one in a URL
    assert credential_in(f"user:{SECRET}@example.com:org/k.git") == "a password"
    assert redact(f"cloning user:{SECRET}@example.com:org/k.git failed", {}) == \
        "cloning ***@example.com:org/k.git failed"

