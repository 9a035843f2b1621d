"""Where a run's log lines go: always to the Prefect API, to the terminal as asked.

Prefect sends the records of its run loggers (``prefect.flow_runs``,
``prefect.task_runs``) to the API and lets them propagate to its console
handler on the root logger. `route_run_logs` makes the run loggers pass INFO,
so the stage lines (`flows.signals`) reach the server whatever
``PREFECT_LOGGING_LEVEL`` says, and filters the console instead:

- ``quiet``: no Prefect record; other records from ERROR up (the CLI prints its
  own error line and the result).
- ``normal`` (the CLI's default): no Prefect record; other records (privpipe's
  own warnings) from WARNING up.
- ``verbose`` (``-v``): Prefect's records from INFO up (the stage lines, the
  run's start and final state), others from WARNING up.
- ``library`` (the Python API): Prefect's records from ``PREFECT_LOGGING_LEVEL``
  (WARNING by default) up.

On the console an expected failure (a `PrivpipeError`: bad input, denied,
integrity) is one line, never a traceback: the CLI's error line says what to
do, and the run's log on the server keeps the whole record.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum

from schemas.errors import PrivpipeError

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class Verbosity(StrEnum):
    """How much of a run the terminal shows."""

    quiet = "quiet"
    normal = "normal"
    verbose = "verbose"
    library = "library"


def _prefect_threshold(mode: Verbosity) -> int:
    if mode is Verbosity.verbose:
        return logging.INFO
    if mode is Verbosity.library:
        level = logging.getLevelName(os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING").upper())
        return level if isinstance(level, int) else logging.WARNING
    return logging.CRITICAL + 1  # none


class ConsoleFilter(logging.Filter):
    """The console's share of the records (see the module docstring)."""

    def __init__(self, mode: Verbosity) -> None:
        """Thresholds for Prefect's records and for the others."""
        super().__init__("privpipe-console")
        self.mode = mode
        self.prefect_level = _prefect_threshold(mode)
        self.other_level = logging.ERROR if mode is Verbosity.quiet else logging.WARNING

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep the record if its level passes; drop an expected failure's traceback."""
        prefect = record.name == "prefect" or record.name.startswith("prefect.")
        if record.levelno < (self.prefect_level if prefect else self.other_level):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, PrivpipeError):
            # The console handler comes after the API handler (the root is the
            # last logger a record reaches): the server has the full record.
            record.exc_info, record.exc_text = None, None
        return True


def _console_handlers() -> list[logging.Handler]:
    from prefect.logging.handlers import PrefectConsoleHandler

    return [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]


def route_run_logs(mode: Verbosity | None = None) -> None:
    """Send INFO run records to the API; show on the console what `mode` asks (idempotent).

    Call after Prefect configured its logging (``import prefect.main``). The
    flows call it with no mode as they start (a served or deployed run, a
    direct call): the console then keeps the filter the CLI or the API chose,
    else gets the ``library`` one.
    """
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    for handler in _console_handlers():
        old = [f for f in handler.filters if isinstance(f, ConsoleFilter)]
        if mode is None and old:
            continue
        for f in old:
            handler.removeFilter(f)
        handler.addFilter(ConsoleFilter(mode or Verbosity.library))
    if mode is None:
        return
    if mode is not Verbosity.verbose:
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
