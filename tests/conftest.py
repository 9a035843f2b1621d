"""Session-wide test settings: offline, quiet, project-local Prefect home."""

import os
import tempfile

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
