"""Shared fixtures of the ledger tests: a policy with one domain of each notion."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledger_helpers import POLICY, POLICY_ENTRIES, copy_tree, sha_of
from served_helpers import serve_new_ledger

from ledger import Ledger
from schemas.policy import parse_policy


@pytest.fixture
def policy():
    return parse_policy(POLICY, source="test-policy")


@pytest.fixture(scope="module")
def new_served(tmp_path_factory):
    """A new ledger with POLICY, served (`served_helpers.serve_new_ledger`), for one module."""
    served = serve_new_ledger(tmp_path_factory.mktemp("served"))
    yield served
    served.stop()


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.duckdb"


@pytest.fixture(scope="session")
def _led_template(tmp_path_factory) -> Path:
    """A new ledger with POLICY applied, built once per test process (keys included)."""
    home = tmp_path_factory.mktemp("led-template")
    ledger = Ledger.init(home / "ledger.duckdb", actor="pytest")
    ledger.apply_policy(parse_policy(POLICY, source="test-policy"))
    report = ledger.verify()
    assert report.ok and report.entries_checked == POLICY_ENTRIES, report.message
    return home


@pytest.fixture
def led(ledger_path: Path, _led_template: Path) -> Ledger:
    """A new ledger with POLICY applied at `ledger_path`: a copy of the session's template.

    `Ledger.init` + `apply_policy` (new keys, three policy entries) cost 0.3-0.8 s per
    test; the copy keeps the same files (ledger, noise and signing keys, pin, counter,
    modes), so each test still starts from a fresh ledger of its own, only the keys are
    the same between tests of one process.
    """
    copy_tree(_led_template, ledger_path.parent)
    for src in _led_template.iterdir():  # byte for byte the verified template
        assert sha_of(ledger_path.parent / src.name) == sha_of(src), src.name
    return Ledger(ledger_path, actor="pytest")
