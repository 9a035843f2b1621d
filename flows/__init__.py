"""privpipe's flows, CLI and Python API.

The Python API (implemented in `flows.api`; docs/python-api.md)::

    from flows import audit, release_curves, release_streams

Importing this package does nothing else: no setting is changed and no
directory is created. Prefect is set up by one explicit call, `configure`
(`flows.settings.configure_prefect`: the PREFECT_HOME rule), which the CLI
makes when it starts and the API functions make before they first reach
Prefect. The flows and Prefect load on the first call.
"""

from __future__ import annotations

from typing import Any

from flows.settings import configure_prefect as configure

__all__ = ["audit", "configure", "release_curves", "release_streams"]


def __getattr__(name: str) -> Any:
    """The API functions, imported from `flows.api` on first use (no Prefect import yet)."""
    if name in ("audit", "release_curves", "release_streams"):
        from flows import api

        return getattr(api, name)
    raise AttributeError(f"module 'flows' has no attribute {name!r}")
