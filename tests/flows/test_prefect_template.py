"""The Prefect database template a new home's temporary server starts from.

`flows.prefect_server.seed_database` copies the installation's migrated empty
database into a PREFECT_HOME that has none, so the temporary server skips
Prefect's migrations. Attacks: a template others can write or a symlink in its
place (a planted database would receive the runs' parameters and logs), an
existing database it must never replace, a configured database elsewhere.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from flows import prefect_server
from flows.prefect_server import seed_database, template_path, write_template

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def template(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "share" / "prefect-x.db"
    path.parent.mkdir()
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(64))
    path.chmod(0o644)
    monkeypatch.setattr(prefect_server, "template_path", lambda: path)
    return path


def _home(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return home, f"sqlite+aiosqlite:///{home / 'prefect.db'}"


def test_a_new_home_gets_a_private_copy(tmp_path, template):
    home, url = _home(tmp_path)
    old = os.umask(0o022)
    try:
        assert seed_database(home, url) is True
    finally:
        os.umask(old)
    db = home / "prefect.db"
    assert db.read_bytes() == template.read_bytes()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["prefect.db"]  # no partial copy left


def test_an_existing_database_is_never_replaced(tmp_path, template):
    home, url = _home(tmp_path)
    (home / "prefect.db").write_bytes(b"the runs of last week")
    assert seed_database(home, url) is False
    assert (home / "prefect.db").read_bytes() == b"the runs of last week"
    (home / "prefect.db").unlink()
    (home / "prefect.db").symlink_to(tmp_path / "elsewhere.db")   # dangling link: still there
    assert seed_database(home, url) is False
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_database_made_by_another_process_meanwhile_is_kept(tmp_path, template, monkeypatch):
    """Two processes start a server on one new home: the one that comes second keeps the first's."""
    home, url = _home(tmp_path)
    (home / "prefect.db").write_bytes(b"made by the other process")
    monkeypatch.setattr(prefect_server.os.path, "lexists", lambda _p: False)  # checked before it
    assert seed_database(home, url) is False
    assert (home / "prefect.db").read_bytes() == b"made by the other process"
    assert sorted(p.name for p in home.iterdir()) == ["prefect.db"]


@pytest.mark.parametrize("plant", ["group-writable", "world-writable", "symlink"])
def test_a_template_others_could_have_written_is_not_used(tmp_path, template, plant):
    home, url = _home(tmp_path)
    if plant == "symlink":
        real = tmp_path / "planted.db"
        real.write_bytes(template.read_bytes())
        template.unlink()
        template.symlink_to(real)
    else:
        template.chmod(0o664 if plant == "group-writable" else 0o646)
    assert seed_database(home, url) is False
    assert not (home / "prefect.db").exists()


def test_a_configured_database_elsewhere_is_not_seeded(tmp_path, template):
    home, _ = _home(tmp_path)
    assert seed_database(home, "postgresql+asyncpg://prefect@db/prefect") is False
    assert seed_database(home, f"sqlite+aiosqlite:///{tmp_path / 'other.db'}") is False
    assert not (home / "prefect.db").exists()


def test_no_template_means_prefect_migrates_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(prefect_server, "template_path", lambda: tmp_path / "absent.db")
    home, url = _home(tmp_path)
    assert seed_database(home, url) is False and not (home / "prefect.db").exists()


def test_write_template_refuses_a_process_that_read_prefects_settings():
    import prefect.settings  # noqa: F401 - this test process has, as the CLI would

    with pytest.raises(RuntimeError, match="not imported Prefect"):
        write_template()


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="the template is made by this checkout's Makefile install")
def test_the_install_made_the_template():
    """`make` (the README's commands, .ci/run) runs --write-template after installing."""
    path = template_path()
    assert path.is_file() and not path.is_symlink(), path
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"
    assert stat.S_IMODE(path.stat().st_mode) & 0o022 == 0
