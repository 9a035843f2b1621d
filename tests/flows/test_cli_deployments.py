"""The bundled deployments (prefect.yaml) run on bundled data.

On main `daily-ais-release` pointed at data/inputs/ais_latest.csv, which does
not exist. Here the pull steps run as a worker runs them (Prefect's own
`run_steps`, with PRIVPIPE_DIR set), then every deployment's parameters pass
the checks a run makes before Prefect, and the stream release and the audit
run to completion on what the pull step prepared.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import yaml

from flows import preflight
from flows.serve import _signature_problems

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def deployed(tmp_path, monkeypatch):
    from prefect.deployments.steps.core import run_steps

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    monkeypatch.setenv("PRIVPIPE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(REPO)
    asyncio.run(run_steps(spec["pull"], print_function=lambda *a: None))
    assert Path.cwd() == tmp_path  # set_working_directory ran first
    return spec


def _flow(entrypoint: str):
    import importlib

    path, name = entrypoint.split(":")
    return getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)


def test_every_bundled_deployment_is_valid_on_the_prepared_data(deployed):
    for dep in deployed["deployments"]:
        flow, params = _flow(dep["entrypoint"]), dep["parameters"]
        assert _signature_problems(flow, params)[0] == [], dep["name"]
        if flow.name == "release-curves":  # the inputs too, as the CLI checks them
            assert preflight.curves_release_problems(params, read_input=True)[0] == [], dep["name"]
        elif flow.name == "release-streams":
            assert preflight.streams_release_problems(params, read_input=True)[0] == [], (
                dep["name"])
        for key in ("input_path", "ledger_path"):
            if key in params:
                assert Path(params[key]).is_file(), (dep["name"], key)


@pytest.mark.slow
def test_the_bundled_stream_release_and_audit_run(deployed):
    deps = {d["name"]: d for d in deployed["deployments"]}
    res = _flow(deps["daily-power-release"]["entrypoint"])(
        **deps["daily-power-release"]["parameters"])
    assert res["manifest"]["counts"]["users_released"] == 1
    audit = _flow(deps["weekly-audit"]["entrypoint"])(**deps["weekly-audit"]["parameters"])
    assert audit["ok"]
