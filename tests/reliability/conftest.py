"""Reliability tests: one Prefect harness for the session, a template ledger and inputs."""

from __future__ import annotations

from pathlib import Path

import harness
import pytest


@pytest.fixture(scope="session")
def prefect_api(request) -> str:
    """Start Prefect's test harness once; return its API URL (CLI subprocesses share it)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    cm = prefect_test_harness(server_startup_timeout=120)
    cm.__enter__()
    request.addfinalizer(lambda: cm.__exit__(None, None, None))
    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness did not set an API URL"
    return str(url)


@pytest.fixture(scope="session")
def setup(tmp_path_factory, prefect_api) -> harness.Setup:
    """Template ledger (policy applied, some budget spent) and curves/streams inputs."""
    return harness.make_setup(tmp_path_factory.mktemp("reliability"), api_url=prefect_api)


@pytest.fixture()
def fresh_ledger(setup, tmp_path) -> Path:
    """A private copy of the template ledger and its key."""
    return harness.clone_ledger(setup.template, tmp_path / "home")
