"""Dask and Ray workers on other hosts need a Prefect API they can reach (issue #28, 6).

Seen before the check (docs/deployment.md): a ``tcp://`` scheduler on another host with
the CLI's temporary Prefect server (127.0.0.1) reserved the budget, then failed on the
first remote task with exit 1 "internal error … Failed to reach API at
http://127.0.0.1:PORT/api/". The check refuses that before anything is reserved.
"""

from __future__ import annotations

import pytest

from flows.runners import remote_api_problem
from schemas.errors import ParameterError


@pytest.mark.parametrize("spec, api", [
    ("tcp://10.0.0.5:8786", None),
    ("tls://scheduler.example:8786", None),
    ("ray://ray-head:10001", None),
    ("tcp://10.0.0.5:8786", "http://127.0.0.1:4200/api"),
    ("tcp://10.0.0.5:8786", "http://localhost:4200/api"),
    ("tcp://10.0.0.5:8786", "http://[::1]:4200/api"),
    ("tcp://10.0.0.5:8786", "http://127.0.0.2:4200/api"),
])
def test_workers_on_other_hosts_without_a_reachable_api_are_refused(spec, api):
    problem = remote_api_problem(spec, api)
    assert problem is not None and problem.startswith(f"task runner {spec}:")
    assert "PREFECT_API_URL" in problem and "privpipe+https://" in problem


@pytest.mark.parametrize("spec, api", [
    ("tcp://10.0.0.5:8786", "http://prefect-server:4200/api"),  # a shared server
    ("tls://scheduler.example:8786", "https://prefect.example/api"),
    ("tcp://127.0.0.1:8786", None),  # workers on this host reach the temporary server
    ("tls://localhost:8786", "http://127.0.0.1:4200/api"),
    ("privpipe+https://w1.example:9443", None),  # task runs stay in the flow process
    ("threads", None),
    ("dask", None),
])
def test_reachable_or_local_cases_pass(spec, api):
    assert remote_api_problem(spec, api) is None


def test_make_task_runner_refuses_before_building(monkeypatch):
    from flows.runners import make_task_runner

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    with pytest.raises(ParameterError, match="the Prefect API http://127.0.0.1:4200/api is "
                                             "on loopback"):
        make_task_runner("tcp://10.0.0.5:8786")


def test_preflight_refuses_with_no_api(monkeypatch):
    from flows import preflight

    monkeypatch.setattr("flows.settings.configured_api_url", lambda: None)
    with pytest.raises(ParameterError, match="no Prefect API is configured"):
        preflight.task_runner_spec("tcp://10.0.0.5:8786")
    assert preflight.task_runner_spec("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
