"""Bearer-token files (ledger service client, privpipe workers on both sides).

A token file other local users can read leaks the credential (a releaser's
token reserves budget in its name); one they can replace hands the client to
them. Every reader of a token file (`ledger.keys.read_token_file`) refuses
both, and follows symbolic links, as Kubernetes mounts Secret files.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from ledger_helpers import PYTHON, subprocess_env

from ledger.keys import read_token_file
from ledger.remote import load_token
from schemas.errors import ParameterError

TOKEN = "a-token-of-at-least-32-characters-x"


def _token(tmp_path, mode: int, name: str = "token"):
    path = tmp_path / name
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640, 0o440])
def test_private_or_group_readable_files_are_read(tmp_path, mode):
    assert read_token_file(_token(tmp_path, mode), "t") == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o660, 0o622, 0o666])
def test_files_others_can_read_or_replace_are_refused(tmp_path, mode, monkeypatch):
    path = _token(tmp_path, mode)
    with pytest.raises(ParameterError, match=f"permissions {mode:04o}.*chmod 600") as exc:
        read_token_file(path, "t")
    assert exc.value.exit_code == 2
    monkeypatch.delenv("PRIVPIPE_LEDGER_TOKEN", raising=False)
    monkeypatch.setenv("PRIVPIPE_LEDGER_TOKEN_FILE", str(path))
    with pytest.raises(ParameterError, match="PRIVPIPE_LEDGER_TOKEN_FILE"):
        load_token()


def test_a_symlink_is_followed_to_the_file_it_names(tmp_path):
    """Kubernetes mounts a Secret's keys as links into ``..data/``."""
    (tmp_path / "..data").mkdir()
    target = _token(tmp_path / "..data", 0o440)
    (tmp_path / "token").symlink_to(target)
    assert read_token_file(tmp_path / "token", "t") == TOKEN
    target.chmod(0o444)
    with pytest.raises(ParameterError, match="permissions 0444"):
        read_token_file(tmp_path / "token", "t")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(tmp_path):
    path = _token(tmp_path, 0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(ParameterError, match="owned by uid 65534"):
        read_token_file(path, "t")


def test_empty_missing_and_fifo_are_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    os.mkfifo(tmp_path / "fifo", 0o600)
    for path, rule in ((empty, "is empty"), (tmp_path / "none", "cannot read"),
                       (tmp_path / "fifo", "not a regular file")):
        with pytest.raises(ParameterError, match=rule):
            read_token_file(path, "t")


def test_worker_serve_refuses_a_world_readable_token_file_with_exit_2(tmp_path):
    path = _token(tmp_path, 0o644)
    r = subprocess.run([PYTHON, "-m", "flows.cli", "worker", "serve", "--listen",
                        "127.0.0.1:1", "--insecure-loopback", "--token-file", str(path)],
                       env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "permissions 0644" in r.stderr, r.stderr
