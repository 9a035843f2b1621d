"""`--task-runner tcp://...`: chunks travel through Dask to workers that cannot read our files.

The test starts a Dask scheduler and two worker processes as a freshly created
unprivileged Unix user, each with its own HOME and TMPDIR. The flow's input,
staging directory, outputs, ledger and noise key all live under pytest's
temporary directory (mode 0700, owned by root), so a worker that tried to read
a chunk file, a seed file or the ledger would fail. The release must complete
on those workers and write exactly the bytes the threads runner writes.

Needs root (to create the user and start processes as it), as CI runs.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from dask_cluster import ROOT, dask_cluster, digest

from flows.release import release_curves

# The workers may run another micro version of the same Python (see _worker_python),
# which Dask reports as a version mismatch warning.
pytestmark = [pytest.mark.prefect, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::distributed.versions.VersionMismatchWarning")]

USER = "privpipe-dask-test"
PROBE = "import sys, numpy, distributed, prefect, tasks.privatize; print(sys.version_info[:2])"


@pytest.fixture(scope="module")
def other_user():
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.fail("this test must run as root with useradd (CI does): it starts Dask "
                    "workers as another Unix user")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        USER], check=True)
        created = True
    entry = pwd.getpwnam(USER)
    yield entry
    if created:
        subprocess.run(["userdel", USER], check=False)


def _worker_python(user: pwd.struct_passwd, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """An interpreter `user` can run that imports this project (same Python minor version).

    This venv's own interpreter if the user can reach it; else (e.g. a Python under
    /root) another interpreter of the same minor version, with this venv's packages
    and the repository on PYTHONPATH.
    """
    want = str(tuple(sys.version_info[:2]))
    major, minor = sys.version_info[:2]
    extra = {"PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}", "PYTHONNOUSERSITE": "1"}
    tried = []
    for exe, more in ((sys.executable, {}), (shutil.which(f"python{major}.{minor}"), extra),
                      (f"/usr/bin/python{major}.{minor}", extra)):
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-c", PROBE], env={**env, **more}, cwd="/",
                                 user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                 capture_output=True, text=True, timeout=120, check=False)
        except PermissionError:
            tried.append(f"{exe}: not executable by {user.pw_name}")
            continue
        if out.returncode == 0 and out.stdout.strip() == want:
            return exe, more
        tried.append(f"{exe}: {out.stdout.strip()} {out.stderr.strip()[-300:]}")
    pytest.fail(f"no Python {major}.{minor} that user {user.pw_name} can run imports privpipe "
                "(CI: install python3 for all users or make the venv's interpreter reachable): "
                + "; ".join(tried))


@pytest.fixture(scope="module")
def cluster(other_user):
    """A scheduler and two single-threaded workers running as `other_user`."""
    home = Path(tempfile.mkdtemp(prefix="privpipe-dask-home-"))
    os.chown(home, other_user.pw_uid, other_user.pw_gid)
    home.chmod(0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1",
           "DASK_DISTRIBUTED__WORKER__DAEMON": "false"}
    python, more = _worker_python(other_user, env)
    env.update(more)
    popen = functools.partial(subprocess.Popen, user=other_user.pw_uid,
                              group=other_user.pw_gid, extra_groups=[])
    try:
        with dask_cluster(home, env=env, python=python, worker=["--nworkers", "2"], workers=2,
                          popen=popen, what=f"the Dask cluster of user {USER}") as (address, _):
            yield address
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_remote_workers_of_another_user_give_the_threads_bytes(
        cluster, other_user, curves_csv, policy_file, ledger_path, tmp_path):
    from distributed import Client

    from flows.runners import make_task_runner

    # the flow's files are out of the workers' reach
    assert tmp_path.stat().st_mode & 0o077 == 0 or tmp_path.parent.stat().st_mode & 0o077 == 0
    with Client(cluster) as client:
        uids = client.run(os.getuid)
        readable = client.run(os.access, str(ledger_path), os.R_OK)
        can_list = client.run(os.access, str(tmp_path), os.X_OK)
    assert set(uids.values()) == {other_user.pw_uid} and len(uids) == 2
    assert not any(readable.values()) and not any(can_list.values())

    kw = dict(input_path=str(curves_csv), domain="tracks", epsilon="0.5",
              ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=2,
              release_id="cross-user")
    threads = release_curves.with_options(task_runner=make_task_runner("threads"))(
        out_dir=str(tmp_path / "threads"), **kw)
    remote = release_curves.with_options(task_runner=make_task_runner(cluster))(
        out_dir=str(tmp_path / "remote"), **kw)
    assert digest(Path(remote["out"])) == digest(Path(threads["out"]))
    assert len(digest(Path(remote["out"]))) == 3

    # the mechanism tasks ran on those workers (one per chunk of 2 users: 3 chunks)
    with Client(cluster) as client:
        ran = client.run_on_scheduler(
            lambda dask_scheduler: {k: dict(v.state_counts)
                                    for k, v in dask_scheduler.task_prefixes.items()})
    chunks = [counts for name, counts in ran.items() if "privatize_curve_chunk" in name]
    assert chunks and sum(sum(c.values()) for c in chunks) >= 3, ran
