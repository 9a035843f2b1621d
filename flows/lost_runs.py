"""Flow runs whose process ended without finishing them, marked Crashed with what to do.

A flow run that privpipe starts in its own process (the CLI, the Python API,
``privpipe serve``, a deployment's flow process) is tagged with that process:
``process:HOST:PID:START`` (`process_tag`; START is the kernel's start time of
the process, so a reused pid is not taken for the same process). A process
killed with SIGKILL, or a host that lost power, cannot report its run's end,
and Prefect would show the run Running (or Pending) forever. Each time privpipe
reaches a Prefect API (`flows.prefect_server.prefect_session`) it looks for
runs tagged ``privpipe`` that are still Running or Pending, were started on
this host, and whose process no longer exists, and sets them Crashed with a
message naming the process and the fix: run the same command again (the
ledger resumes the release: what was reserved is not charged twice, and
nothing is drawn afresh). Runs of other hosts are left to Prefect's own
heartbeats (docs/operations.md, "Prefect").
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

PROCESS_TAG = "process:"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunProcess:
    """The process a run's ``process:`` tag names."""

    host: str
    pid: int
    start: int


def start_time(pid: int) -> int | None:
    """The kernel's start time of process `pid` (clock ticks since boot); None: no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[19])  # field 22 of proc(5): starttime
    except (IndexError, ValueError):
        return None


def process_tag() -> str:
    """The tag that names this process: ``process:HOST:PID:START``."""
    pid = os.getpid()
    return f"{PROCESS_TAG}{socket.gethostname()}:{pid}:{start_time(pid) or 0}"


def parse_process_tag(tags: list[str]) -> RunProcess | None:
    """The process a run's tags name (None: no well-formed ``process:`` tag)."""
    for tag in tags:
        if not tag.startswith(PROCESS_TAG):
            continue
        parts = tag[len(PROCESS_TAG):].rsplit(":", 2)  # a host name holds no ':'; be lenient
        if len(parts) == 3 and parts[0] and parts[1].isdigit() and parts[2].isdigit():
            return RunProcess(parts[0], int(parts[1]), int(parts[2]))
    return None


def is_lost(proc: RunProcess, host: str) -> bool:
    """Whether `proc` ran on `host` and has ended (or its pid now belongs to another process)."""
    if proc.host != host:
        return False
    now = start_time(proc.pid)
    return now is None or (proc.start != 0 and now != proc.start)


def _message(proc: RunProcess, state: str) -> str:
    return (f"privpipe process {proc.pid} on {proc.host} ended while this run was {state} "
            "(killed, or its machine stopped): run the same command again to finish the "
            "release (the ledger resumes it: nothing reserved is charged twice, no noise is "
            "drawn afresh)")


def reap_lost_runs(client: Any) -> list[str]:
    """Set Crashed every privpipe run still Running/Pending whose process on this host ended.

    Args:
        client: a synchronous Prefect client (`prefect.get_client(sync_client=True)`).

    Returns:
        The names of the runs marked Crashed.
    """
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        tags=FlowRunFilterTags(all_=["privpipe"]),
        state=FlowRunFilterState(type=FlowRunFilterStateType(
            any_=[StateType.RUNNING, StateType.PENDING]))), limit=200)
    host, marked = socket.gethostname(), []
    for run in runs:
        proc = parse_process_tag(list(run.tags))
        if proc is None or not is_lost(proc, host):
            continue
        state = run.state.name if run.state is not None else "Running"
        client.set_flow_run_state(run.id, Crashed(message=_message(proc, state)), force=True)
        marked.append(run.name)
    return marked


def reap_quietly() -> None:
    """`reap_lost_runs` on the current API; a failure is logged, never raised (runs go on)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            names = reap_lost_runs(client)
    except Exception as err:  # noqa: BLE001 - reaping is housekeeping: it must not stop a run
        log.warning("could not check for runs left Running by ended processes: %s", err)
        return
    for name in names:
        log.warning("flow run %r was left Running by a process that ended; marked Crashed", name)
