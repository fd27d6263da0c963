"""Credentials masked by default: every URL the factory prints or logs loses its user part,
its query values and its fragment unless their key is known to be harmless, and the value of
every secret of the environment is masked wherever it stands (a hostile setup.py printing its
environment, a registry echoing a password)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from factory.cells.run import CellResult
from factory.pipeline.outcomes import cell_outcomes

from ..support.plans import demo_plan


def test_a_failed_cell_s_published_reason_holds_no_secret(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's reason is published (manifest, browse data): it is masked like a log line."""
    monkeypatch.setenv("HF_TOKEN", "hf_s3cretTOKEN")
    plan = demo_plan(tmp_path)
    (cell,) = plan.cells
    detail = ("git clone https://bot:pw-s3cret@git.example/k.git?private_token=tok-s3cret "
              "failed: hf_s3cretTOKEN was refused")
    (outcome,) = cell_outcomes(plan, [CellResult(cell.id, "failed", 1.0, detail=detail)])
    assert outcome.detail is not None and "git clone https://" in outcome.detail
    assert not any(secret in outcome.detail for secret in ("pw-s3cret", "tok-s3cret",
                                                           "hf_s3cretTOKEN")), outcome.detail


def test_the_hubs_own_log_lines_and_an_hf_target_hold_no_secret(
        capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface_hub logs each retry with the URL it requested (HF_ENDPOINT's password
    included) through its own handler: once the factory talks to the Hub, those lines are
    masked. An hf:// target with a token where the owner goes is refused without echoing it
    (the Hub's parser would)."""
    import logging

    import pytest
    from huggingface_hub.utils import logging as hub_logging

    from factory.errors import ConfigError, FactoryError
    from factory.hub import hub_errors, parse_hf_target

    retrying = hub_logging.get_logger("huggingface_hub.utils._http")
    with hub_errors("org/name", None, where="test", refused=FactoryError, failed=FactoryError):
        # the hub's handlers write to the stream they were made with (an earlier test's
        # captured stderr, when that test imported huggingface_hub first): this test's stderr
        handlers = [handler for handler in logging.getLogger("huggingface_hub").handlers
                    if isinstance(handler, logging.StreamHandler)]
        streams = [handler.setStream(sys.stderr) for handler in handlers]
        try:
            retrying.warning("'[Errno 111] Connection refused' thrown while requesting GET "
                             "http://user:pw-s3cret@127.0.0.1:9/api/models/org/name")
        finally:
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(stream)
    err = capsys.readouterr().err
    assert "GET http://***@127.0.0.1:9/api/models/org/name" in err and "s3cret" not in err
    assert logging.getLogger("huggingface_hub").propagate is False
    with pytest.raises(ConfigError) as refused:
        parse_hf_target("hf://hf_s3cretTOKEN@org/name", "--to")
    assert "s3cret" not in str(refused.value) and "'hf://***@org/name'" in str(refused.value)
