"""privpipe for analysts: ``privpipe.Session``, DataFrames in and out (docs/python-api.md).

    import privpipe

    with privpipe.Session(policy={"domains": {...}}) as session:
        rel = session.release(df, domain="tracks", epsilon=0.5)

The session is a front end to the same release path as the CLI (`flows.api`):
importing this package starts nothing (Prefect loads on the first release).
"""

from __future__ import annotations

from privpipe.results import DryRun, Release
from privpipe.session import Session

__all__ = ["DryRun", "Release", "Session"]
