"""Session-wide test settings: offline, quiet, project-local Prefect home."""

import os
import tempfile

_home = tempfile.mkdtemp(prefix="privpipe-test-prefect-")
os.environ["PREFECT_HOME"] = _home
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "90"
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
os.environ["PREFECT_RESULTS_PERSIST_BY_DEFAULT"] = "false"
os.environ.setdefault("MPLBACKEND", "Agg")
