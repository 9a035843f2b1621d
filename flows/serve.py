"""`privpipe serve`: run the release flows on cron schedules.

Schedules come from a TOML file (``--config``), one ``[[release]]`` table per
scheduled release::

    [[release]]
    name = "daily-ais"                 # deployment name
    flow = "release_curves"            # release_curves | release_streams | audit
    cron = "0 2 * * *"                 # 5-field cron, evaluated in `timezone`
    timezone = "UTC"
    [release.parameters]               # the flow's parameters
    input_path = "/data/ais/latest.csv"
    domain = "ais_tracks"
    epsilon = "0.05"
    ledger_path = "/var/lib/privpipe/ledger.duckdb"

Each scheduled run derives its release id from the scheduled date, so a
retried or re-triggered run of the same day reuses the same id (no second
charge) and the next day's run is a new release.

`check_schedules` (``serve --check``) validates every schedule before anything
is served and lists every problem: the file's keys, the cron and timezone, the
parameters against the flow's signature and types, and what a release would
check before Prefect starts (input file, ledger and key, the ledger's domain,
ε/ρ, mechanism). Relative paths are read from the directory serve runs in.

Schedules do not fire on Prefect's temporary server (its scheduler does not
run): `serve` uses the configured Prefect API (PREFECT_API_URL or the active
profile) and otherwise starts a full Prefect server (UI and scheduler) on
127.0.0.1 that stops with it (`flows.prefect_server`).
"""

from __future__ import annotations

import inspect
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.errors import PolicyError, Problem

FLOWS = ("release_curves", "release_streams", "audit")
_KEYS = {"name", "flow", "cron", "timezone", "parameters"}


@dataclass(frozen=True)
class ScheduledRelease:
    """One scheduled deployment read from the schedules file."""

    name: str
    flow: str
    cron: str
    timezone: str = "UTC"
    parameters: dict[str, Any] = field(default_factory=dict)
    index: int = 0

    @property
    def key(self) -> str:
        """Where this schedule sits in the file: ``release[I]``."""
        return f"release[{self.index}]"


def _problem(path: Path, key: str, message: str) -> Problem:
    return Problem(str(path), None, key, "schedule", message)


def _raise_all(problems: list[Problem]) -> None:
    if not problems:
        return
    if len(problems) == 1:
        raise PolicyError(problems)
    raise PolicyError(problems, f"{problems[0].file}: {len(problems)} problems:\n" + "\n".join(
        f"  - {p.column}: {p.message}" for p in problems))


def load_schedules(path: str | Path) -> list[ScheduledRelease]:
    """Read a schedules TOML file; every problem of its shape is listed at once.

    Raises:
        PolicyError: naming each key (``release[I].KEY``) and its allowed values.
    """
    schedules, problems = read_schedules(path)
    _raise_all(problems)
    return schedules


def read_schedules(path: str | Path) -> tuple[list[ScheduledRelease], list[Problem]]:
    """The schedules of a TOML file and every problem of its shape, without raising.

    A schedule is returned whenever its flow and parameters table are usable, even
    with a bad name or cron, so `check_schedules` can check its parameters in the
    same round (``serve --check`` lists every problem at once).

    Raises:
        PolicyError: the file cannot be read, is not TOML, or has no [[release]].
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise PolicyError(_problem(p, "<file>", f"cannot read: {err.strerror}")) from None
    except tomllib.TOMLDecodeError as err:
        raise PolicyError(_problem(p, "<file>", f"not valid TOML: {err}")) from None
    entries = data.get("release")
    if not isinstance(entries, list) or not entries:
        raise PolicyError(_problem(p, "release", "needs at least one [[release]] table"))
    problems: list[Problem] = []
    out: list[ScheduledRelease] = []
    names: set[str] = set()
    for i, e in enumerate(entries):
        k = f"release[{i}]"
        for extra in sorted(set(e) - _KEYS):
            problems.append(_problem(p, f"{k}.{extra}",
                                     f"unknown key; allowed: {', '.join(sorted(_KEYS))}"))
        name = e.get("name")
        if not isinstance(name, str) or not name:
            problems.append(_problem(p, f"{k}.name", "is required: a deployment name"))
        elif name in names:
            problems.append(_problem(p, f"{k}.name", f"{name!r} is used twice"))
        names.add(name if isinstance(name, str) else "")
        if e.get("flow") not in FLOWS:
            problems.append(_problem(p, f"{k}.flow", f"must be one of {', '.join(FLOWS)}"))
        problems += _cron_problems(p, k, e.get("cron"), e.get("timezone", "UTC"))
        params = e.get("parameters", {})
        if not isinstance(params, dict):
            problems.append(_problem(p, f"{k}.parameters", "must be a table of flow parameters"))
        elif e.get("flow") in FLOWS:  # its parameters can be checked (`check_schedules`)
            out.append(ScheduledRelease(name if isinstance(name, str) else "", e["flow"],
                                        str(e.get("cron", "")), str(e.get("timezone", "UTC")),
                                        params, i))
    return out, problems


_CRON_HINTS = {"cron": 'e.g. "0 2 * * *"', "timezone": "an IANA time zone, e.g. UTC"}


def _cron_problems(path: Path, k: str, cron: Any, timezone: Any) -> list[Problem]:
    if not isinstance(cron, str) or len(cron.split()) != 5:
        return [_problem(path, f"{k}.cron", "must be a 5-field cron string, e.g. \"0 2 * * *\"")]
    from prefect.client.schemas.schedules import CronSchedule

    out = []
    for key, kwargs in (("cron", {"cron": cron}),
                        ("timezone", {"cron": "0 0 * * *", "timezone": str(timezone)})):
        try:
            CronSchedule(**kwargs)
        except ValueError:  # pydantic's ValidationError is a ValueError
            out.append(_problem(path, f"{k}.{key}",
                                f"{kwargs[key]!r} is not valid; {_CRON_HINTS[key]}"))
    return out


def _flows() -> dict[str, Any]:
    from flows.audit_flow import audit
    from flows.release import release_curves, release_streams

    return {"release_curves": release_curves, "release_streams": release_streams,
            "audit": audit}


def _signature_problems(flow: Any, params: dict[str, Any]
                        ) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
    """Problems of `params` against the flow's signature, and the known parameters.

    The known parameters (unknown ones left out) are None when a required one is
    missing or a type is wrong: the release's own checks need them whole.
    """
    sig = inspect.signature(flow.fn)
    allowed = [n for n in sig.parameters if n != "scheduled_date"]
    out = [(n, f"unknown parameter of {flow.fn.__name__}; allowed: {', '.join(allowed)}")
           for n in params if n not in allowed]
    missing = [(n, f"is required by {flow.fn.__name__}") for n, prm in sig.parameters.items()
               if prm.default is inspect.Parameter.empty and n not in params]
    if missing:
        return out + missing, None
    known = {n: v for n, v in params.items() if n in allowed}
    try:
        flow.validate_parameters(known)
    except Exception as err:  # noqa: BLE001 - Prefect's ParameterTypeError and pydantic's
        return out + [("parameters", str(err).strip().replace("\n", "; "))], None
    return out, known


def _audit_problems(params: dict[str, Any]) -> list[tuple[str, str]]:
    from flows import preflight
    from ledger.remote import open_ledger
    from schemas.errors import BadInputError

    out = []
    try:
        open_ledger(params.get("ledger_path", ".privpipe/ledger.duckdb"))
    except BadInputError as err:
        out.append(("ledger_path", str(err)))
    try:
        preflight.out_dir(params.get("out_dir", "out"))
    except BadInputError as err:
        out.append(("out_dir", str(err)))
    return out


def check_schedules(schedules: list[ScheduledRelease], source: str | Path,
                    problems: list[Problem] | None = None) -> None:
    """Validate every schedule as its runs would be, without running or charging anything.

    `problems` (the file's shape problems, `read_schedules`) are listed first, with
    every parameter problem of every schedule: one round.

    Raises:
        PolicyError: one problem per bad key or parameter (``release[I].parameters.NAME``).
    """
    from flows import preflight

    flows = _flows()
    problems = list(problems or [])
    for s in schedules:
        found, known = _signature_problems(flows[s.flow], s.parameters)
        if known is not None:
            if s.flow == "release_curves":
                found += preflight.curves_release_problems(known)[0]
            elif s.flow == "release_streams":
                found += preflight.streams_release_problems(known)[0]
            else:
                found += _audit_problems(known)
        problems += [_problem(Path(source), f"{s.key}.parameters.{n}", m) for n, m in found]
    _raise_all(problems)


PATH_PARAMETERS = ("input_path", "out_dir", "ledger_path", "policy_path")
"""Parameters holding paths: stored absolute in a deployment (`absolute_paths`)."""


def absolute_paths(parameters: dict[str, Any]) -> dict[str, Any]:
    """`parameters` with every relative path made absolute against the working directory.

    Relative paths are read from the directory `serve` runs in; storing them
    absolute keeps "Run again" (or a worker started elsewhere) on the same files.
    """
    return {k: str(Path(v).absolute()) if k in PATH_PARAMETERS and isinstance(v, str) else v
            for k, v in parameters.items()}


def build_deployments(schedules: list[ScheduledRelease]) -> list[Any]:
    """Turn schedules into Prefect deployments (`flow.to_deployment`), paths made absolute."""
    from prefect.schedules import Cron

    flows = _flows()
    return [flows[s.flow].to_deployment(name=s.name, schedule=Cron(s.cron, timezone=s.timezone),
                                        parameters=absolute_paths(s.parameters))
            for s in schedules]
