"""Shared fixtures of the ledger tests: a policy with one domain of each notion."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledger_helpers import POLICY

from ledger import Ledger
from schemas.policy import parse_policy


@pytest.fixture
def policy():
    return parse_policy(POLICY, source="test-policy")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.duckdb"


@pytest.fixture
def led(ledger_path: Path, policy) -> Ledger:
    ledger = Ledger.init(ledger_path, actor="pytest")
    ledger.apply_policy(policy)
    return ledger
