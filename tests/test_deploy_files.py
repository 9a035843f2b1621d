"""deploy/ says what the code accepts: the compose file, the Dockerfile, prefect.yaml.

No container runtime is needed: the compose file is parsed as YAML, every
`privpipe` command line in it (and in make-secrets.sh) is resolved against the
CLI's own click tree (`typer.main.get_command(flows.cli.app)`: each word a
subcommand, each `--flag` an option of that command, each required option
given), the Dask command lines against distributed's click commands, the
deployments' entrypoints are imported and their parameters checked against the
flows' signatures, and the Dockerfile's runtime stage is checked to carry no
compiler and to run as a non-root user.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest
import typer
import yaml

from flows.cli import app

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"

COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|build-essential|libc6-dev|python3-dev|make)\b")


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _options(cmd) -> tuple[set[str], set[str]]:
    """(every option name, the required ones' first names) of a click command.

    Typer carries its own copy of click, so options are told by their names.
    """
    names, required = set(), set()
    for p in cmd.params:
        if p.opts and p.opts[0].startswith("-"):
            names |= set(p.opts) | set(p.secondary_opts)
            if p.required:
                required.add(p.opts[0])
    return names, required


def check_privpipe_argv(argv: list[str]) -> list[str]:
    """Problems of one `privpipe ARGV` command line (empty: the CLI accepts it)."""
    group = typer.main.get_command(app)
    words: list[str] = []
    cmd = group
    rest = list(argv)
    while rest and not rest[0].startswith("-") and hasattr(cmd, "commands"):
        word = rest.pop(0)
        words.append(word)
        if word not in cmd.commands:
            cmd = None
            break
        cmd = cmd.commands[word]
    flags = {a.split("=", 1)[0] for a in rest if a.startswith("--")}
    if cmd is None:
        return [f"privpipe {' '.join(words)}: no such command"]
    names, required = _options(cmd)
    where = f"privpipe {' '.join(words)}"
    return ([f"{where}: unknown option {f}" for f in sorted(flags - names)]
            + [f"{where}: missing required option {r}" for r in sorted(required - flags)])


def _argv(service: dict) -> tuple[list[str], list[str]]:
    entry = service.get("entrypoint", ["privpipe"])
    return list(entry), list(service.get("command", []))


def test_compose_parses_and_has_the_services():
    services = _compose()["services"]
    assert {"prefect-server", "ledger", "worker", "privpipe-worker", "dask-scheduler",
            "dask-worker", "audit", "ledger-replica"} <= set(services)
    for name, svc in services.items():
        assert svc.get("image") == "privpipe:0.1.0", name
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile", name
    # Every named volume and secret a service uses is declared, and every secret file
    # is one make-secrets.sh writes (or auditor.pub, from `ledger pubkey`).
    doc = _compose()
    script = (DEPLOY / "make-secrets.sh").read_text()
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            src = v.split(":", 1)[0]
            if not src.startswith((".", "/", "$")):
                assert src in doc["volumes"], (name, src)
        for s in svc.get("secrets", []):
            assert s in doc["secrets"], (name, s)
    for s, spec in doc["secrets"].items():
        stem = Path(spec["file"]).name
        assert stem == "auditor.pub" or stem.split(".")[0] in script, s


def test_published_ports_are_loopback_only():
    for name, svc in _compose()["services"].items():
        for p in svc.get("ports", []):
            assert str(p).startswith("127.0.0.1:"), (name, p)


@pytest.mark.parametrize("name", sorted(yaml.safe_load(
    (DEPLOY / "compose.yaml").read_text())["services"]))
def test_every_command_line_is_accepted(name):
    entry, command = _argv(_compose()["services"][name])
    if entry == ["privpipe"]:
        assert check_privpipe_argv(command) == []
    elif entry == ["dask"]:
        pytest.importorskip("distributed")
        sub = command[0]
        mod = importlib.import_module(f"distributed.cli.dask_{sub}")
        names, _ = _options(mod.main)
        flags = {a for a in command[1:] if a.startswith("--")}
        assert flags <= names, flags - names
    else:
        assert entry == ["prefect"], (name, entry)
        assert command[:2] in (["server", "start"], ["worker", "start"]), command


def test_make_secrets_calls_serve_token_as_the_cli_accepts():
    script = (DEPLOY / "make-secrets.sh").read_text()
    line = re.search(r"set -- (ledger serve-token .*)", script).group(1)
    argv = [w for w in shlex.split(line) if not w.startswith("$")]
    argv = [w for w in argv if w not in ("", '"$DIR/clients.toml"')]
    assert check_privpipe_argv(argv) == []


def test_the_checker_catches_a_bad_flag():
    # The check above is worth something only if it fails on a misspelling.
    assert check_privpipe_argv(["worker", "serve", "--listen", "x", "--tls-crt", "c"])
    assert check_privpipe_argv(["worker", "serv"])
    assert check_privpipe_argv(["ledger", "serve", "--listen", "x"])  # required options
    assert check_privpipe_argv(["ledger", "replicate", "--to", "r", "--every", "1"]) == []


def test_deployments_name_real_flows_and_parameters():
    doc = yaml.safe_load((DEPLOY / "prefect.yaml").read_text())
    assert doc["deployments"]
    for dep in doc["deployments"]:
        module, func = dep["entrypoint"].split(":")
        flow = getattr(importlib.import_module(module), func)
        params = inspect.signature(flow.fn).parameters
        unknown = set(dep["parameters"]) - set(params)
        assert unknown == set(), (dep["name"], unknown)
        missing = [p for p, v in params.items()
                   if v.default is inspect.Parameter.empty and p not in dep["parameters"]]
        assert missing == [], (dep["name"], missing)
        assert dep["work_pool"]["name"] == "privpipe"


def _stages(text: str) -> dict[str, str]:
    parts = re.split(r"^FROM\s+", text, flags=re.M)[1:]
    return {re.search(r"\bAS\s+(\w+)", p.splitlines()[0], re.I).group(1): p for p in parts}


def test_dockerfile_runtime_stage_has_no_compiler_and_runs_as_non_root():
    text = (DEPLOY / "Dockerfile").read_text()
    stages = _stages(text)
    assert set(stages) == {"builder", "runtime"}
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.11-slim", text)
    runtime = "\n".join(line for line in stages["runtime"].splitlines()
                        if not line.lstrip().startswith("#"))
    runs = " ".join(re.findall(r"^RUN\s+(.*?)(?<!\\)$", runtime, re.M | re.S))
    assert not COMPILERS.search(runs), COMPILERS.search(runs)
    assert "apt-get install" not in runtime
    assert "--no-index" in runtime  # nothing fetched or built at install time
    user = re.findall(r"^USER\s+(\S+)", runtime, re.M)
    assert user and not user[-1].startswith(("root", "0")), user
    assert re.search(r'^ENTRYPOINT \["privpipe"\]', runtime, re.M)
    assert re.search(r"^ENV .*PRIVPIPE_HOME=/var/lib/privpipe", runtime, re.M)
    assert "gcc" in stages["builder"] and "pip wheel" in stages["builder"]


def test_privpipe_variables_of_the_compose_file_are_documented():
    doc = (REPO / "docs" / "deployment.md").read_text()
    names = {k for svc in _compose()["services"].values()
             for k in svc.get("environment", {}) if k.startswith("PRIVPIPE_")}
    assert names and {n for n in names if f"`{n}`" not in doc} == set()


def test_kubernetes_sketch_parses_and_its_command_lines_are_accepted():
    text = (REPO / "docs" / "deployment.md").read_text()
    docs = [d for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
            for d in yaml.safe_load_all(block) if d]
    kinds = {d.get("kind"): d for d in docs if "kind" in d}
    assert kinds["StatefulSet"]["spec"]["replicas"] == 1
    for d in docs:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if "args" in c:  # the image's entrypoint is privpipe
                assert check_privpipe_argv([str(a) for a in c["args"]]) == [], c["name"]


def _pod_specs(docs: list[dict]) -> list[dict]:
    return [d["spec"]["template"]["spec"] for d in docs
            if d.get("spec", {}).get("template", {}).get("spec")]


def test_kubernetes_secret_modes_pass_the_token_file_rule():
    # Kubernetes Secret files are owned by root with the pod's fsGroup as group.
    # privpipe refuses a token file with any permission for others or group
    # write (ledger.keys.read_token_file); a non-root pod needs group read to
    # read it at all. 0400 (unreadable to uid 10001) or 0644 (readable by all)
    # would each stop the pod at start-up.
    text = (REPO / "docs" / "deployment.md").read_text()
    docs = [d for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
            for d in yaml.safe_load_all(block) if d]
    secrets = 0
    for pod in _pod_specs(docs):
        ctx = pod.get("securityContext", {})
        for vol in pod.get("volumes", []):
            if "secret" not in vol:
                continue
            secrets += 1
            mode = vol["secret"].get("defaultMode", 0o644)
            assert mode & 0o027 == 0, (vol["name"], oct(mode))
            if ctx.get("runAsUser", 0) != 0:
                assert ctx.get("fsGroup") is not None and mode & 0o040, (vol["name"], oct(mode))
    assert secrets >= 4


def test_the_dockerfile_checks_and_imports_every_kernel_of_setup_py():
    """The image build stops when the wheel lacks a compiled kernel; it named 2 of the 4."""
    kernels = re.findall(r'_kernel\("([\w.]+)"\)', (REPO / "setup.py").read_text())
    assert len(kernels) >= 4, kernels
    stages = _stages((DEPLOY / "Dockerfile").read_text())
    for name in kernels:
        assert f"'{name.replace('.', '/')}'" in stages["builder"], name   # in the wheel
        assert re.search(rf"import [\w., ]*\b{re.escape(name)}\b", stages["runtime"]), name
