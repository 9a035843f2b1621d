"""One PREFECT_HOME rule and one "is Prefect configured?" answer for the CLI and the API.

On main the CLI forced its own PREFECT_HOME and ignored PREFECT_API_URL and the active
profile, while Python API runs used ~/.prefect: three Prefect databases.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows import settings


@pytest.fixture()
def clean(tmp_path, monkeypatch):
    for var in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path / "pp"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _profile(user: Path, text: str) -> None:
    (user / ".prefect").mkdir(parents=True, exist_ok=True)
    (user / ".prefect" / "profiles.toml").write_text(text)


def test_rule_3_nothing_configured_uses_privpipe_home(clean):
    settings.configure_prefect()
    assert os.environ["PREFECT_HOME"] == str(clean / "pp" / "prefect")
    assert settings.profile_api_url() is None


def test_rule_1_an_operators_prefect_home_is_kept(clean, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(clean / "mine"))
    settings.configure_prefect()
    settings.configure_prefect(clean / "bench")  # an explicit home never overrides it
    assert os.environ["PREFECT_HOME"] == str(clean / "mine")


def test_rule_2_a_configured_api_keeps_prefects_default_home(clean, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    settings.configure_prefect()
    assert "PREFECT_HOME" not in os.environ


def test_active_profile_with_an_api_url_counts_as_configured(clean):
    _profile(clean / "user", 'active = "ops"\n[profiles.ops]\n'
                             'PREFECT_API_URL = "http://10.0.0.5:4200/api"\n'
                             '[profiles.local]\nPREFECT_LOGGING_LEVEL = "INFO"\n')
    assert settings.profile_api_url() == "http://10.0.0.5:4200/api"
    settings.configure_prefect()
    assert "PREFECT_HOME" not in os.environ  # ~/.prefect, so that profile applies


def test_prefect_profile_picks_the_profile(clean, monkeypatch):
    _profile(clean / "user", 'active = "ops"\n[profiles.ops]\n'
                             'PREFECT_API_URL = "http://10.0.0.5:4200/api"\n[profiles.local]\n')
    monkeypatch.setenv("PREFECT_PROFILE", "local")
    assert settings.profile_api_url() is None


def test_a_profile_without_an_api_url_is_not_a_server(clean):
    _profile(clean / "user", 'active = "ephemeral"\n[profiles.ephemeral]\n'
                             'PREFECT_SERVER_ALLOW_EPHEMERAL_MODE = "true"\n')
    assert settings.profile_api_url() is None
    settings.configure_prefect()
    assert os.environ["PREFECT_HOME"] == str(clean / "pp" / "prefect")


def test_the_cli_and_the_api_get_the_same_home(clean):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    show = "print(os.environ.get('PREFECT_HOME'))"
    # the API: its functions call flows.configure before they reach Prefect
    api = subprocess.run([sys.executable, "-c", f"import os, flows; flows.configure(); {show}"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    # the CLI: its entry point calls it when it starts (here for `privpipe --help`)
    run_cli = ("import os, sys; sys.argv = ['privpipe', '--help']\nfrom flows.cli import main\n"
               f"try:\n    main()\nexcept SystemExit:\n    pass\n{show}")
    cli = subprocess.run([sys.executable, "-c", run_cli], env=env, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    bare = subprocess.run([sys.executable, "-c", f"import os, flows; {show}"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert bare == "None", "importing flows must not configure Prefect"
    assert api == cli == str(clean / "pp" / "prefect")
