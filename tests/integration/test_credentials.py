"""Credentials masked by default: every URL the factory prints or logs loses its user part,
its query values and its fragment unless their key is known to be harmless, and the value of
every secret of the environment is masked wherever it stands (a hostile setup.py printing its
environment, a registry echoing a password)."""

from __future__ import annotations

from factory.cells.run import CellResult
from factory.index.records import cell_outcomes

from ..unit.test_matrix import demo_plan


def test_a_failed_cell_s_published_reason_holds_no_secret(tmp_path, monkeypatch):
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
