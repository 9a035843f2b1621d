"""The temporary Prefect server privpipe starts when no Prefect server is configured.

`prefect_session()` gives the CLI and the Python API one way to reach Prefect:
the configured API when there is one (`flows.settings.configured_api_url`),
otherwise a temporary server on 127.0.0.1 that this process starts and stops.
The temporary server is a child process that dies with its parent, SIGKILL
included: on Linux the kernel kills it when the parent dies
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set in the child before it serves), and
everywhere a watchdog thread in the child kills it within half a second of
its parent's death (its parent pid changes when it is re-parented). Its logs go
to ``PREFECT_HOME/temporary-server.log``.

Run as ``python -m flows.prefect_server PARENT_PID PORT [--pdeathsig]`` it is
that child; ``python -m flows.prefect_server --write-template`` (run by the
Makefile at install) makes the migrated empty database a new home starts from
(`seed_database`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from files.safe_files import make_dirs, open_append, rename_new, write_file
from flows.settings import (
    configure_prefect,
    configured_api_url,
    ensure_prefect_home,
    prefect_home,
)
from schemas.errors import BadInputError

_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.5
_STOP_SECONDS = 5.0


class PrefectUnavailableError(BadInputError):
    """The configured Prefect API does not answer, or the temporary server did not start."""


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_answers(url: str, timeout: float = 2.0) -> bool:
    """Whether anything answers HTTP at ``URL/health`` (any status: Cloud needs a key)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout):  # noqa: S310
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as r:  # noqa: S310
            return r.status == 200
    except (OSError, ValueError):
        return False


class TemporaryServer:
    """A loopback Prefect API server owned by this process (see the module docstring)."""

    def __init__(self, home: Path, port: int | None = None, *, full: bool = False):
        """Remember where the server keeps its database; nothing starts yet.

        Args:
            home: its PREFECT_HOME (database, logs).
            port: loopback port (default: a free one).
            full: run Prefect's services and UI too (the scheduler that makes cron
                schedules fire; `privpipe serve`), not only the API.
        """
        self.home = home
        self.full = full
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The API URL (``http://127.0.0.1:PORT/api``)."""
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def log_path(self) -> Path:
        """Where the server's output goes."""
        return self.home / "temporary-server.log"

    def start(self) -> TemporaryServer:
        """Start the child process (returns at once; `wait_ready` waits for it)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._log = open_append(self.log_path)  # closed in stop(); never through a symlink
        argv = [sys.executable, "-m", "flows.prefect_server", str(os.getpid()), str(self.port)]
        if threading.current_thread() is threading.main_thread():
            # PR_SET_PDEATHSIG fires when the *thread* that forked the child ends:
            # only the main thread lives as long as the process.
            argv.append("--pdeathsig")
        env = {**os.environ, "PREFECT_HOME": str(self.home), "PREFECT__SERVER_FINAL": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        if not self.full:
            env.update(PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1")
        env.pop("PREFECT_API_URL", None)
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            argv, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the server answers its health check.

        Raises:
            PrefectUnavailableError: it exited or did not answer in time (names the log).
        """
        limit = timeout if timeout is not None else float(
            os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60"))
        deadline = time.monotonic() + limit
        assert self.proc is not None, "start() first"
        while time.monotonic() < deadline:
            if _healthy(self.url):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        code = self.proc.poll()
        self.stop()
        why = f"exited with code {code}" if code is not None else f"did not answer in {limit:g} s"
        raise PrefectUnavailableError(
            f"the temporary Prefect server on 127.0.0.1:{self.port} {why}; see {self.log_path}. "
            "Set PREFECT_API_URL to use a running Prefect server instead.")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s); idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _drain_prefect_workers() -> None:
    """Deliver queued Prefect logs and events before the API goes away.

    Without this the workers flush at interpreter exit, after a temporary
    server is stopped, and print "EventsWorker - Still processing items".
    """
    if "prefect.logging.handlers" in sys.modules:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=_STOP_SECONDS)
    if "prefect.events.worker" in sys.modules:
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=_STOP_SECONDS)


@contextlib.contextmanager
def _api_url_set(url: str) -> Iterator[None]:
    """Point this process (and the children it starts) at `url` for the duration."""
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


@contextlib.contextmanager
def _heartbeats_off(off: bool) -> Iterator[None]:
    """No flow-run heartbeats for the block when `off` (a temporary API-only server).

    Heartbeats feed a server's zombie-run automations; a temporary server stops with
    this process, so none could ever see one missing (privpipe's own `lost_runs`
    marks this host's killed runs Crashed instead). And Prefect's sync engine joins
    the heartbeat thread, which sleeps in 1 s steps, at the end of each flow run:
    every run ended 0.5 s later on average. A configured server keeps them.
    """
    if not off:
        yield
        return
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


@contextlib.contextmanager
def prefect_session(preload: Sequence[str] = (), *, serve_port: int | None = None
                    ) -> Iterator[str]:
    """Reach a Prefect API for the duration of the block; yield its URL.

    Uses the configured API (checked to answer); otherwise starts the temporary
    server, imports the `preload` modules while it boots, and stops it on exit
    (after Prefect's log and event queues are delivered).

    Args:
        preload: modules to import while a server starts.
        serve_port: start a full server (scheduler and UI) on this port instead of
            the API-only temporary one (`privpipe serve`).

    Raises:
        PrefectUnavailableError: the configured API does not answer, or the
            temporary server did not start.
    """
    configure_prefect()
    ensure_prefect_home()
    url = configured_api_url()
    server: TemporaryServer | None = None
    if url is not None:
        if not api_answers(url):
            raise PrefectUnavailableError(
                f"the configured Prefect API {url} does not answer; start that server, or "
                "unset PREFECT_API_URL (and the active profile's) to use a temporary one")
    else:
        server = TemporaryServer(prefect_home(), serve_port, full=serve_port is not None).start()
        url = server.url
    try:
        for name in preload:
            importlib.import_module(name)
        if server is not None:
            server.wait_ready()
        with _api_url_set(url), _heartbeats_off(server is not None and serve_port is None):
            from flows.lost_runs import reap_quietly

            reap_quietly()  # runs left Running by a killed privpipe process: Crashed
            try:
                yield url
            finally:
                _drain_prefect_workers()
    finally:
        if server is not None:
            server.stop()


# --------------------------------------------------------------------------- the database template


def template_path() -> Path:
    """The empty, migrated Prefect database of this installation and Prefect version.

    Made once at install (`write_template`, run by the Makefile); a temporary server
    on a home without a database starts from a copy of it instead of running
    Prefect's ~100 migrations (about 6-9 s of every first start).
    """
    from importlib.metadata import version

    return Path(sys.prefix) / "share" / "privpipe" / f"prefect-{version('prefect')}.db"


def write_template() -> Path:
    """Migrate an empty Prefect database into `template_path()` (atomically); return the path.

    Must run in a process that has not read Prefect's settings yet (its own
    ``python -m flows.prefect_server --write-template``): the database goes to a
    temporary PREFECT_HOME.
    """
    import asyncio
    import tempfile

    if "prefect.settings" in sys.modules:
        raise RuntimeError("write_template needs a process that has not imported Prefect")
    target = template_path()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PREFECT_HOME"] = tmp
        for name in ("PREFECT_API_DATABASE_CONNECTION_URL",
                     "PREFECT_SERVER_DATABASE_CONNECTION_URL"):
            os.environ.pop(name, None)
        from prefect.server.database import provide_database_interface

        asyncio.run(provide_database_interface().create_db())
        copy = Path(tmp) / "template.db"
        # SQLite's backup: one consistent copy, the write-ahead log's pages included
        with contextlib.closing(sqlite3.connect(Path(tmp) / "prefect.db")) as src, \
                contextlib.closing(sqlite3.connect(copy)) as dst:
            src.backup(dst)
            if dst.execute("SELECT version_num FROM alembic_version").fetchone() is None:
                raise RuntimeError("Prefect's migrations left no alembic version")
        make_dirs(target.parent, mode=0o755)
        write_file(target, copy.read_bytes(), mode=0o644)
    return target


def _trusted_template() -> Path | None:
    """`template_path()` if it is a regular file only its owner (us or root) can write."""
    path = template_path()
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0) \
            or st.st_mode & 0o022:
        return None
    return path


def _database_url() -> str:
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    return url.get_secret_value() if hasattr(url, "get_secret_value") else str(url)


def seed_database(home: Path, url: str | None = None) -> bool:
    """Give a home with no Prefect database a private copy (0600) of the template.

    Only for Prefect's default database (``HOME/prefect.db``; `url` is the
    configured database URL, default Prefect's current setting); never over an
    existing file (the copy is renamed in under its name with no replace, which
    fails if another process got there first). Returns whether this call seeded it.
    """
    db = home / "prefect.db"
    url = _database_url() if url is None else url
    template = _trusted_template()
    if url != f"sqlite+aiosqlite:///{db}" or template is None or os.path.lexists(db):
        return False
    seed = home / f".prefect.db.{os.getpid()}.seed"
    write_file(seed, template.read_bytes(), mode=0o600, durable=False)
    try:
        rename_new(seed, db)
    except FileExistsError:
        return False
    finally:
        seed.unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------- the child


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_SECONDS)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="privpipe-parent-watchdog", daemon=True).start()


def _serve(argv: Sequence[str]) -> None:
    if list(argv) == ["--write-template"]:
        print(write_template())
        return
    if len(argv) < 2 or not all(a.isdigit() for a in argv[:2]):
        raise SystemExit("usage: python -m flows.prefect_server PARENT_PID PORT [--pdeathsig]")
    parent, port = int(argv[0]), int(argv[1])
    _die_with_parent(parent, "--pdeathsig" in argv[2:])
    # only a shortcut: Prefect migrates a home without it (a full disk, say, says so later)
    with contextlib.suppress(OSError, BadInputError):
        seed_database(Path(os.environ["PREFECT_HOME"]))
    import uvicorn

    uvicorn.run("prefect.server.api.server:create_app", factory=True, host="127.0.0.1",
                port=port, log_level="error", lifespan="on")


if __name__ == "__main__":
    _serve(sys.argv[1:])
