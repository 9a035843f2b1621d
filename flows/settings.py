"""Process-wide settings of the CLI and the flows: where things live, Prefect pins.

`configure_prefect()` must run before Prefect is imported: it pins a
project-local PREFECT_HOME, turns off the server's telemetry (which causes
"database is locked" noise offline) and gives the temporary server time to
start on a slow machine (DESIGN.md, "Facts about Prefect 3.9").
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_POLICY = REPO_ROOT / "data" / "policy.toml"


def privpipe_home() -> Path:
    """``$PRIVPIPE_HOME``, else ``./.privpipe``."""
    return Path(os.environ.get("PRIVPIPE_HOME") or Path.cwd() / ".privpipe")


def configure_prefect(home: Path | None = None) -> None:
    """Apply the Prefect settings privpipe relies on (idempotent; call before importing prefect)."""
    base = home or privpipe_home()
    os.environ.setdefault("PREFECT_HOME", str(base / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # Results that could hold raw data are never persisted (DESIGN.md): pass paths, not data.
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "false")
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
