"""Process-wide settings of the CLI, the Python API and the flows: where things live.

One rule decides which Prefect privpipe talks to and where Prefect keeps its
files, for the CLI and the Python API alike (`configure_prefect`, exported as
`flows.configure`: called by the CLI when it starts and by the API before it
first reaches Prefect; importing `flows` changes nothing):

1. ``PREFECT_HOME`` set: used as it is.
2. Otherwise, if Prefect is configured for this user (``PREFECT_API_URL`` in the
   environment, or the active profile of Prefect's own profiles file sets
   ``PREFECT_API_URL``), Prefect's default home (``~/.prefect``) is left alone,
   so that profile applies.
3. Otherwise ``$PRIVPIPE_HOME/prefect``, else ``./.privpipe/prefect``, next to
   the default ledger.

A configured API (`configured_api_url`) is always used; only when none is
configured does privpipe start its temporary loopback server
(`flows.prefect_server`). The pins below also turn off the server's telemetry
(which causes "database is locked" noise offline), give a temporary server
time to start on a slow machine, and never persist task results (they could
hold raw data).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_POLICY = REPO_ROOT / "data" / "policy.toml"

# Files in the working directory from which Prefect 3 also reads settings.
_LOCAL_PREFECT_FILES = ("prefect.toml", ".env")


def privpipe_home() -> Path:
    """``$PRIVPIPE_HOME``, else ``./.privpipe``."""
    return Path(os.environ.get("PRIVPIPE_HOME") or Path.cwd() / ".privpipe")


def _prefect_default_home() -> Path:
    return Path.home() / ".prefect"


def _profiles_path() -> Path:
    explicit = os.environ.get("PREFECT_PROFILES_PATH")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("PREFECT_HOME")
    return (Path(home).expanduser() if home else _prefect_default_home()) / "profiles.toml"


def profile_api_url() -> str | None:
    """``PREFECT_API_URL`` of Prefect's active profile, if its profiles file sets one."""
    try:
        data = tomllib.loads(_profiles_path().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    name = os.environ.get("PREFECT_PROFILE") or data.get("active") or "ephemeral"
    profiles = data.get("profiles")
    profile = profiles.get(name) if isinstance(profiles, dict) else None
    url = profile.get("PREFECT_API_URL") if isinstance(profile, dict) else None
    return url if isinstance(url, str) and url.strip() else None


def local_prefect_config(cwd: Path | None = None) -> bool:
    """Whether the working directory holds a file Prefect reads settings from."""
    here = cwd or Path.cwd()
    if any((here / name).is_file() for name in _LOCAL_PREFECT_FILES):
        return True
    try:
        return "[tool.prefect" in (here / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def configured_api_url() -> str | None:
    """The Prefect API the user configured, or None when privpipe must start its own.

    Read without importing Prefect when possible (the environment and the active
    profile); when Prefect is already imported (a notebook, a test harness) or the
    working directory has a Prefect settings file, Prefect's own settings answer.
    """
    import sys

    if "prefect.settings" in sys.modules or local_prefect_config():
        from prefect.settings import get_current_settings

        return get_current_settings().api.url or None
    return os.environ.get("PREFECT_API_URL") or profile_api_url()


# The PREFECT_HOME `configure_prefect` set by rule 3 (an explicit `home` may replace
# it; a PREFECT_HOME the operator set is never replaced).
_rule_home: str | None = None


def _rule_3_home() -> Path:
    return privpipe_home() / "prefect"


def prefect_home() -> Path:
    """The PREFECT_HOME that rule 1-3 of the module docstring gives."""
    explicit = os.environ.get("PREFECT_HOME")
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("PREFECT_API_URL") or profile_api_url():
        return _prefect_default_home()
    return _rule_3_home()


def configure_prefect(home: Path | None = None) -> None:
    """Apply the Prefect settings privpipe relies on (idempotent; call before importing prefect).

    Every value is a default: a variable the operator set is never overridden.

    Args:
        home: use ``HOME/prefect`` instead of rule 3's directory (benchmarks, tests).
    """
    global _rule_home
    current = os.environ.get("PREFECT_HOME")
    chosen_by_rule = current is not None and current == _rule_home
    if (not current or (home is not None and chosen_by_rule)) and not (
            os.environ.get("PREFECT_API_URL") or profile_api_url()):
        _rule_home = str(home / "prefect" if home else _rule_3_home())
        os.environ["PREFECT_HOME"] = _rule_home
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # Results that could hold raw data are never persisted (docs/design.md): pass paths.
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "false")


def ensure_prefect_home() -> Path | None:
    """Create PREFECT_HOME (mode 0700, with its parents) so Prefect can use it.

    Prefect creates its home itself but not the parents, which rule 3's
    directory may not have yet. The home and its SQLite database (with its WAL
    and shared-memory files) must be the running user's and writable by nobody
    else (`ledger.paths.check_private`): a planted database would receive the
    runs' parameters and logs where another user reads them. Returns the
    directory (None: Prefect's default).

    Raises:
        LedgerOpenError: the home or its database is another user's or writable
            by others (exit code 2).
    """
    from ledger.paths import check_private

    home = os.environ.get("PREFECT_HOME")
    if not home:
        return None
    path = Path(home).expanduser()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(path, "the Prefect home")
    for name in ("prefect.db", "prefect.db-wal", "prefect.db-shm"):
        check_private(path / name, "the Prefect database")
    return path
