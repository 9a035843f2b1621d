"""Release files an attacker on the same host (or a careless operator) cannot bend.

Each test replays one attack of issue #12 against the real CLI (a subprocess on
the shared Prefect test server) or the release flow in-process:

* a release id that is a path (``../escaped``, ``/abs/path``);
* a symlink planted in ``OUT/<release_id>/`` (before the first run, or in a
  published release before a rerun);
* a stale staging directory whose ``owner.pid`` names a live unrelated process;
* a full output disk (a small tmpfs mounted as the output directory);
* the modes of the files a release creates under umask 022;
* five releases SIGKILLed one after the other;
* a rerun of a published release, untouched and tampered with.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import harness
import pytest

from flows.release import release_curves, release_streams
from ledger import Ledger


def _cli(setup: harness.Setup, args: list[str], home: Path, cwd: Path, *,
         umask: int | None = None, api: bool = True, extra_env: dict[str, str] | None = None,
         ) -> harness.Run:
    """Run the CLI like `harness.run_cli`, optionally under a given umask."""
    env = harness.cli_env(home, api_url=setup.api_url if api else None)
    env.update(extra_env or {})
    if umask is None:
        return harness.run_cli(args, env, cwd=cwd)
    old = os.umask(umask)     # inherited by the subprocess
    try:
        return harness.run_cli(args, env, cwd=cwd)
    finally:
        os.umask(old)


def _release_args(setup: harness.Setup, rid: str, out: Path, ledger: Path) -> list[str]:
    return harness.release_args("curves", setup.inputs["curves"], rid, out, ledger, setup.policy)


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _staging_dirs(out: Path) -> list[Path]:
    root = out / ".staging"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def _run(setup: harness.Setup, rid: str, out: Path, ledger: Path, kind: str = "curves") -> dict:
    common = {"release_id": rid, "out_dir": str(out), "ledger_path": str(ledger),
              "policy_path": str(setup.policy), "chunk_users": 2}
    if kind == "curves":
        return release_curves(input_path=str(setup.inputs["curves"]), domain="tracks",
                              epsilon="1/2", **common)
    return release_streams(input_path=str(setup.inputs["streams"]), domain="meters",
                           epsilon="2", **common)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("rid", ["../escaped", "ABS", "a/b", ".hidden", ".."])
def test_release_id_that_is_a_path_is_refused_before_anything_runs(rid, setup, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    if rid == "ABS":
        rid = str(tmp_path / "abs" / "path")
    ledger = harness.clone_ledger(setup.template, work / "home")
    before = harness.balances(ledger)
    outside = _files_under(tmp_path) - _files_under(work / "home")
    run = _cli(setup, _release_args(setup, rid, work / "out", ledger), work / "home", work)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--release-id" in run.stderr and "safe name" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    # nothing written anywhere (in OUT or outside it), nothing charged or recorded
    assert not (work / "out").exists()
    assert _files_under(tmp_path) - _files_under(work / "home") == outside
    assert harness.balances(ledger) == before
    assert Ledger(ledger).release(rid) is None


def test_flow_refuses_a_path_release_id_before_staging(setup, tmp_path):
    from schemas.errors import ParameterError

    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    with pytest.raises(ParameterError, match="safe name"):
        _run(setup, "../escaped", tmp_path / "out", ledger)
    assert not (tmp_path / "out").exists() and not (tmp_path / "escaped").exists()


# --------------------------------------------------------------------------- symlinks


@pytest.mark.parametrize("planted", ["report.md", "manifest.json.tmp", "values.parquet",
                                     "plots/private_curves.png"])
def test_symlink_planted_before_the_first_run_is_refused(planted, setup, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    ledger = harness.clone_ledger(setup.template, work / "home")
    before = harness.balances(ledger)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    link = work / "out" / "planted" / planted
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    run = _cli(setup, _release_args(setup, "planted", work / "out", ledger), work / "home", work)
    assert victim.read_bytes() == b"precious\n", "the release wrote through the planted symlink"
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert run.returncode == 4, run.stdout + run.stderr
    assert "planted" in run.stderr and "move it away" in run.stderr, run.stderr
    # refused before anything was reserved
    assert harness.balances(ledger) == before
    assert Ledger(ledger).release("planted") is None


@pytest.fixture(scope="module")
def published(setup, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Releases "swapped" and "tampered", each published once: (ledger, out) per release id.

    The tests below attack a copy each (`_copy_published`): the attack is on the
    published files, so one untouched release per id serves them all.
    """
    made = {}
    for rid in ("swapped", "tampered"):
        root = tmp_path_factory.mktemp(f"published-{rid}")
        ledger = harness.clone_ledger(setup.template, root / "home")
        _run(setup, rid, root / "out", ledger)
        made[rid] = (ledger, root / "out")
    return made


def _copy_published(original: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy (ledger with its keys, the whole OUT tree, modes kept) of a release."""
    ledger, out = original
    copy = tmp_path / "out"
    shutil.copytree(out, copy, symlinks=True)
    return harness.clone_ledger(ledger, tmp_path / "home"), copy


def test_an_untouched_copy_of_a_published_release_reruns_as_published(setup, tmp_path,
                                                                      published):
    """The copies the attacks below start from are sound: untouched, a rerun accepts them."""
    for rid in ("swapped", "tampered"):
        ledger, out = _copy_published(published[rid], tmp_path / rid)
        files = _inodes(out / rid)
        assert _run(setup, rid, out, ledger)["release_id"] == rid
        assert _inodes(out / rid) == files


@pytest.mark.parametrize("planted", ["report.md", "manifest.json", "values.parquet"])
def test_symlink_swapped_into_a_published_release_is_refused_on_rerun(planted, setup,
                                                                       tmp_path, published):
    ledger, out = _copy_published(published["swapped"], tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = out / "swapped" / planted
    target.unlink()
    target.symlink_to(victim)
    _assert_refused(setup, "swapped", out, ledger, f"{planted} is a symlink")
    assert victim.read_text() == "precious\n"
    assert target.is_symlink()


# --------------------------------------------------------------------------- reruns


def _assert_refused(setup: harness.Setup, rid: str, out: Path, ledger: Path, text: str) -> None:
    """A rerun of `rid` fails with an integrity error (exit 4) whose message holds `text`."""
    from schemas.errors import EXIT_INTEGRITY, PrivpipeError

    with pytest.raises(PrivpipeError, match=re.escape(text)) as err:
        _run(setup, rid, out, ledger)
    assert err.value.exit_code == EXIT_INTEGRITY
    assert "move it away" in str(err.value)


def _inodes(rdir: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(rdir)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(rdir.rglob("*")) if p.is_file()}


def test_rerun_of_a_published_release_verifies_it_instead_of_rewriting(setup, tmp_path):
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    out = tmp_path / "out"
    first = _run(setup, "verified", out, ledger)
    rdir = Path(first["out"])
    files = _inodes(rdir)
    assert {"values.parquet", "manifest.json", "report.md", "report.html"} <= set(files)
    entries = Ledger(ledger).entry_range("verified")
    again = _run(setup, "verified", out, ledger)
    assert again["manifest"] == first["manifest"]
    assert _inodes(rdir) == files, "a rerun rewrote files of a published release"
    assert Ledger(ledger).entry_range("verified") == entries
    assert not _staging_dirs(out)


@pytest.mark.parametrize("tamper", ["flip a byte of values.parquet", "truncate report.html",
                                    "add an extra file", "delete segments.parquet",
                                    "edit manifest.json"])
def test_rerun_of_a_tampered_release_names_the_file(tamper, setup, tmp_path, published):
    ledger, out = _copy_published(published["tampered"], tmp_path)
    rdir = out / "tampered"
    if tamper.startswith("flip"):
        data = bytearray((rdir / "values.parquet").read_bytes())
        data[len(data) // 2] ^= 1
        (rdir / "values.parquet").write_bytes(bytes(data))
        name = "values.parquet"
    elif tamper.startswith("truncate"):
        (rdir / "report.html").write_text("")
        name = "report.html"
    elif tamper.startswith("add"):
        (rdir / "extra.csv").write_text("user_id\nuser-0\n")
        name = "extra.csv"
    elif tamper.startswith("delete"):
        (rdir / "segments.parquet").unlink()
        name = "segments.parquet"
    else:
        text = (rdir / "manifest.json").read_text()
        (rdir / "manifest.json").write_text(text.replace('"users_denied": 0', '"users_denied": 1'))
        name = "manifest.json"
    _assert_refused(setup, "tampered", out, ledger, f"tampered/{name}")


# --------------------------------------------------------------------------- staging


def test_stale_staging_whose_pid_is_alive_but_unrelated_is_swept(setup, tmp_path):
    out = tmp_path / "out"
    stale = out / ".staging" / "0123456789abcdef0123456789abcdef"
    stale.mkdir(parents=True)
    (stale / "owner.pid").write_text("1")        # pid 1 is always alive, never a release
    (stale / "chunk-00000.arrow").write_bytes(b"raw chunk")
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    _run(setup, "pid-one", out, ledger)
    assert not stale.exists()
    assert not _staging_dirs(out)


def test_staging_is_private_during_a_release_under_umask_022(setup, tmp_path, monkeypatch):
    """Staging dirs are 0700 and every file in them 0600 (chunk outputs included)."""
    import flows.faults as faults

    seen: list[tuple[str, Path, bool, int]] = []
    real = faults.fault_point
    root = tmp_path / "out" / ".staging"

    def record(name: str) -> None:
        if name in ("after_settle", "after_outputs", "after_manifest"):
            for p in [root, *root.rglob("*")]:
                st = p.lstat()
                seen.append((name, p, stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode)))
        real(name)

    monkeypatch.setattr(faults, "fault_point", record)
    old = os.umask(0o022)
    try:
        for kind in ("curves", "streams"):
            ledger = harness.clone_ledger(setup.template, tmp_path / f"home-{kind}")
            _run(setup, f"modes-{kind}", tmp_path / "out", ledger, kind)
    finally:
        os.umask(old)
    names = {p.name for _, p, _, _ in seen}
    assert any(n.startswith("chunk-") for n in names), names          # raw input chunks
    # noise seeds travel to the tasks in memory (tasks/stage.py): never staged
    assert not any("seed" in n for n in names), names
    assert any(n.startswith(("samples-", "reconstruction-")) for n in names), names  # outputs
    wrong = [f"{when}: {p} {oct(mode)}" for when, p, is_dir, mode in seen
             if mode != (0o700 if is_dir else 0o600)]
    assert not wrong, wrong


def test_five_sigkilled_releases_leave_no_staging_and_no_process(setup, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    home = work / "home"
    ledger = harness.clone_ledger(setup.template, home)
    out = work / "out"
    for i in range(5):
        point = ("after_ingest", "after_reserve", "after_first_chunk", "after_settle",
                 "after_outputs")[i]
        env = harness.cli_env(home, api_url=setup.api_url, fault_at=point)
        run = harness.run_cli(_release_args(setup, f"killed-{i}", out, ledger), env, cwd=work)
        assert run.returncode == -signal.SIGKILL, run.stderr
    deadline = time.monotonic() + 30
    while (_processes_of(home) or _staging_dirs(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_of(home), _processes_of(home)
    assert not _staging_dirs(out), _staging_dirs(out)
    assert not [p for p in _files_under(out) if p.suffix in (".arrow", ".json", ".parquet")]


def _processes_of(home: Path) -> list[str]:
    """Command lines of live processes whose environment names `home` as PRIVPIPE_HOME."""
    needle = f"PRIVPIPE_HOME={home}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if needle in env and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                             .decode(errors="replace"))
        except OSError:
            continue
    return found


# --------------------------------------------------------------------------- disk full


@pytest.fixture()
def small_disk(tmp_path):
    """A 2 MiB tmpfs mounted at tmp_path/disk (root only; skipped elsewhere)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Fill `disk` so that about `leave` bytes stay free."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


@pytest.fixture(scope="module")
def full_disk_reference(setup, tmp_path_factory) -> dict:
    """Balances and output digests of an uninterrupted run of release id "full-disk"."""
    work = tmp_path_factory.mktemp("full-disk-ref")
    ref = harness.clone_ledger(setup.template, work / "home")
    _run(setup, "full-disk", work / "out", ref)
    return {"balances": harness.balances(ref), "digest": harness.digest(work / "out" / "full-disk")}


# About 140 KiB is what this release needs at its peak: 16 KiB runs out while staging
# the input, 64 KiB while writing chunk outputs, 112 KiB in the release's report.
@pytest.mark.parametrize("leave", [16 * 1024, 64 * 1024, 112 * 1024])
def test_full_output_disk_names_the_file_and_leaves_nothing_raw(leave, setup, tmp_path,
                                                               small_disk, full_disk_reference):
    work = tmp_path / "work"
    work.mkdir()
    home = work / "home"
    ledger = harness.clone_ledger(setup.template, home)
    out = small_disk / "out"
    filler = _fill(small_disk, leave)
    run = _cli(setup, _release_args(setup, "full-disk", out, ledger), home, work)
    if run.returncode == 0:
        pytest.fail(f"the release fit in {leave} bytes: the test does not fill the disk")
    assert run.returncode == 2, run.stdout + run.stderr
    err = " ".join(run.stderr.split())
    assert "No space left" in err and str(out) in err, err
    assert "free space" in err and "rerun" in err, err
    assert "Traceback" not in run.stderr
    # nothing raw (staging chunks, seeds) and no partial release left behind
    assert not _staging_dirs(out)
    assert not (out / "full-disk").exists()
    assert not [p for p in _files_under(out) if p.suffix in (".arrow", ".json", ".parquet")]
    # with space again, the same command completes and charges what one run charges
    filler.unlink()
    again = _cli(setup, _release_args(setup, "full-disk", out, ledger), home, work)
    assert again.returncode == 0, again.stdout + again.stderr
    assert harness.balances(ledger) == full_disk_reference["balances"]
    assert harness.digest(out / "full-disk") == full_disk_reference["digest"]


# --------------------------------------------------------------------------- modes


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.mark.parametrize(("setting", "shared_file", "shared_dir"),
                         [(None, 0o600, 0o700), ("027", 0o640, 0o750), ("0o022", 0o644, 0o755)])
def test_file_modes_follow_the_operator_umask_raw_files_stay_private(
        setting, shared_file, shared_dir, setup, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    home = work / "home"
    extra = {"PRIVPIPE_UMASK": setting} if setting else {}
    new_ledger = home / "new.duckdb"
    init = _cli(setup, ["ledger", "init", "--ledger", str(new_ledger)], home, work, umask=0o022,
                extra_env=extra)
    assert init.returncode == 0, init.stdout + init.stderr
    assert _mode(new_ledger) == shared_file
    assert _mode(Path(str(new_ledger) + ".key")) == 0o600
    ledger = harness.clone_ledger(setup.template, home)
    out = work / "out"
    run = _cli(setup, _release_args(setup, "modes", out, ledger), home, work, umask=0o022,
               extra_env=extra)
    assert run.returncode == 0, run.stdout + run.stderr
    rdir = out / "modes"
    assert _mode(rdir) == shared_dir and _mode(rdir / "plots") == shared_dir
    for p in rdir.rglob("*"):
        if p.is_file():
            assert _mode(p) == shared_file, f"{p}: {oct(_mode(p))}"
    assert _mode(out / ".staging") == 0o700


def test_bad_umask_setting_is_refused(setup, tmp_path):
    run = _cli(setup, ["ledger", "init", "--ledger", str(tmp_path / "l.duckdb")], tmp_path,
               tmp_path, extra_env={"PRIVPIPE_UMASK": "999"})
    assert run.returncode == 2 and "PRIVPIPE_UMASK" in run.stderr, run.stderr
    assert not (tmp_path / "l.duckdb").exists()


@pytest.mark.slow
def test_prefect_database_follows_the_umask(setup, tmp_path):
    # No PREFECT_API_URL: the CLI starts its temporary server, whose database lives in
    # PREFECT_HOME under the CLI's umask.
    work = tmp_path / "work"
    work.mkdir()
    home = work / "home"
    ledger = harness.clone_ledger(setup.template, home)
    run = _cli(setup, _release_args(setup, "prefect-db", work / "out", ledger), home, work,
               umask=0o022, api=False)
    assert run.returncode == 0, run.stdout + run.stderr
    dbs = list((home / "prefect").glob("*.db"))
    assert dbs, list((home / "prefect").rglob("*"))
    for p in dbs:
        assert _mode(p) == 0o600, f"{p}: {oct(_mode(p))}"
    assert _mode(home / "prefect") == 0o700
    shutil.rmtree(home / "prefect", ignore_errors=True)
