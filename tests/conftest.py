"""Session-wide test settings: offline, quiet, project-local Prefect home."""

import contextlib
import os
import tempfile
from collections.abc import Iterator

import pytest

# One BLAS thread per process: the mechanisms' small solves are many and short, and
# on a loaded 2-core machine OpenBLAS's thread pool made them ~25x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

_home = tempfile.mkdtemp(prefix="privpipe-test-prefect-")
os.environ["PREFECT_HOME"] = _home
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "90"
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
os.environ["PREFECT_RESULTS_PERSIST_BY_DEFAULT"] = "false"
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """Prefect's test harness, started once per test process by the first test that needs it.

    Every flow test shares it (tests/flows through an autouse fixture; the
    reliability, privacy and ledger modules that run a flow ask for it): a
    harness is a Prefect server in a subprocess, about 10-30 s to start on these
    machines. Returns its API URL, which CLI subprocesses are given.
    """
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    # No flow-run heartbeats in this process. Prefect's sync engine joins its heartbeat
    # thread at the end of every flow run, and that thread sleeps in 1 s steps: each run
    # ended 0.5 s later on average (a 6-user release: 2.1 s -> 1.4 s). The harness copies
    # these settings into the global context, so threads that tests start see them too.
    # Heartbeats only feed Prefect's own zombie-run automations, which no test uses.
    with contextlib.ExitStack() as session:  # closed in reverse order at the session's end
        session.enter_context(temporary_settings(
            updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}))
        session.enter_context(prefect_test_harness(server_startup_timeout=120))
        url = PREFECT_API_URL.value()
        assert url, "the Prefect test harness did not set an API URL"
        yield str(url)
