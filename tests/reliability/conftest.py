"""Reliability tests: a template ledger and inputs (the Prefect harness is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import harness
import pytest


@pytest.fixture(scope="session")
def setup(tmp_path_factory, prefect_api) -> harness.Setup:
    """Template ledger (policy applied, some budget spent) and curves/streams inputs."""
    return harness.make_setup(tmp_path_factory.mktemp("reliability"), api_url=prefect_api)


@pytest.fixture()
def fresh_ledger(setup, tmp_path) -> Path:
    """A private copy of the template ledger and its key."""
    return harness.clone_ledger(setup.template, tmp_path / "home")
