"""privpipe's flows, CLI and Python API.

The Python API (implemented in `flows.api`; docs/python-api.md)::

    from flows import audit, release_curves, release_streams

Importing this package only applies privpipe's Prefect settings
(`flows.settings.configure_prefect`: the one PREFECT_HOME rule shared with the
CLI) and creates that home; Prefect and the flows load on the first call.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from flows.settings import configure_prefect, ensure_prefect_home

configure_prefect()
if not (sys.argv[:1] == ["-m"] or sys.argv[0].endswith("privpipe")):
    # The CLI (`privpipe`, `python -m flows.cli`) and the temporary server's child create
    # the home only when they start Prefect (flows.prefect_server), never for other commands.
    ensure_prefect_home()

__all__ = ["audit", "release_curves", "release_streams"]


def __getattr__(name: str) -> Any:
    if name in ("release_curves", "release_streams"):
        from flows import api

        return getattr(api, name)
    raise AttributeError(f"module 'flows' has no attribute {name!r}")


class _Flows(types.ModuleType):
    """`flows.audit` is the API function, although a submodule has the same name.

    Importing the submodule `flows.audit` makes Python bind it as the package's
    attribute ``audit``; this data descriptor keeps the attribute the function
    (the submodule stays importable: ``from flows.audit import audit``).
    """

    @property
    def audit(self) -> Any:
        from flows import api

        return api.audit

    @audit.setter
    def audit(self, module: types.ModuleType) -> None:
        """Ignore the import system binding the submodule (it is in sys.modules)."""


sys.modules[__name__].__class__ = _Flows
