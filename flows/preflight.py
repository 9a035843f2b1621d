"""Checks a release passes before Prefect starts: arguments, policy, domain, files, ledger.

The CLI and the Python API call `check_curves_release` / `check_streams_release`
first, so every error in what the operator typed appears in about a second
(no Prefect import, no server start) and nothing is charged. The flows check
their parameters again when they run (a deployment calls them directly).

The input itself is checked here too, without converting a row
(`ingest.check_input`): its header and required columns, the types of its
first block, every CSV record's field count and quoting, and for a stream
release whether it continues streams the ledger released at another ε/w
(`continuation_problems`). Row-level rules (finite values, t increasing,
ranges) reject single users, and are found by the release's read, still
before any budget is reserved.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from ledger import Ledger
from ledger.remote import open_ledger
from mechanisms import registry
from mechanisms.cost import exact
from mechanisms.errors import MechanismParameterError
from schemas.errors import BadInputError, ParameterError, ValidationError
from schemas.policy import Domain, load_policy

# Choices of the CLI and of the flows' parameters: the registry's releasable mechanisms.
CURVE_MECHANISMS = registry.names("curves")
STREAM_MECHANISMS = registry.names("streams")
EVALUATE_ON = ("grid", "input")
RECONSTRUCT = ("cpr", "none")
TASK_RUNNERS = ("threads, processes, dask, tcp://HOST:PORT, tls://HOST:PORT, ray://HOST:PORT "
                "or privpipe+https://HOST:PORT[,HOST:PORT...]")
_DUCKDB_SUFFIXES = (".duckdb", ".ddb", ".db")
#: ε or ρ a release accepts: `tasks.privatize.AMOUNT_RANGE` (which imports Prefect; a
#: test checks the two agree)
AMOUNT_RANGE = (Fraction(1, 10**9), Fraction(10**9))


@dataclass(frozen=True)
class CheckedRelease:
    """What the checks established: the domain, the amount, the ledger (opened once)."""

    domain: Domain
    amount: Fraction
    ledger: Ledger


def amount(value: Any, option: str) -> Fraction:
    """Read ε or ρ as the ledger reads it (`mechanisms.cost.exact`): float, int or string.

    Raises:
        ParameterError: not a number or ratio, not finite, or not > 0 (names `option`).
    """
    try:
        x = exact(value)
    except ValueError:
        raise ParameterError(f"{option} must be a positive number or a ratio such as 1/3; "
                             f"got {value!r}") from None
    if x <= 0:
        raise ParameterError(f"{option} must be > 0; got {value!r}")
    if not AMOUNT_RANGE[0] <= x <= AMOUNT_RANGE[1]:
        raise ParameterError(f"{option} must be in [1e-9, 1e9] (the noise scales a mechanism "
                             f"can draw); got {value!r}")
    return x


def parse_options(text: str | None) -> dict[str, Any]:
    """``--options`` JSON text -> a dict (empty when not given)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ParameterError(f"--options must be a JSON object: {err.msg}") from None
    if not isinstance(value, dict):
        raise ParameterError("--options must be a JSON object, e.g. '{\"basis\": \"sinc\"}'")
    return value


def choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    """`value` if it is one of `allowed`, else a ParameterError listing them."""
    if value not in allowed:
        raise ParameterError(f"{option} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def task_runner_spec(spec: str) -> str:
    """Check the form of ``--task-runner`` (the runner itself is built once Prefect runs)."""
    if spec in ("threads", "processes", "dask"):
        return spec
    if spec.startswith(("tcp://", "tls://", "ray://")):
        from flows.runners import remote_api_problem
        from flows.settings import configured_api_url

        problem = remote_api_problem(spec, configured_api_url())
        if problem is not None:
            raise ParameterError(problem)
        return spec
    if spec.startswith(("privpipe+https://", "privpipe+http://")):
        from flows.worker_address import worker_urls

        worker_urls(spec)
        return spec
    raise ParameterError(f"unknown task runner {spec!r}: use {TASK_RUNNERS}")


def input_file(path: str | os.PathLike[str], table: str | None) -> Path:
    """Refuse an input path that is missing, a directory or unreadable; nothing is read.

    Raises:
        ParameterError: naming the path and what it is instead.
    """
    p = Path(path)
    if not p.exists():
        raise ParameterError(f"input {str(p)!r}: no such file")
    if p.is_dir():
        raise ParameterError(f"input {str(p)!r} is a directory; pass a CSV, Parquet or DuckDB "
                             "file")
    if not p.is_file():
        raise ParameterError(f"input {str(p)!r} is not a regular file")
    if not os.access(p, os.R_OK):
        raise ParameterError(f"input {str(p)!r}: permission denied")
    is_duckdb = p.name.lower().endswith(_DUCKDB_SUFFIXES)
    if is_duckdb and not table:
        raise ParameterError(f"input {str(p)!r} is a DuckDB file: name its table with --table")
    if table and not is_duckdb:
        raise ParameterError("--table only applies to DuckDB inputs (.duckdb, .ddb, .db)")
    return p


def out_dir(path: str | os.PathLike[str]) -> Path:
    """Refuse an output path that exists and is not a directory."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ParameterError(f"--out {str(p)!r} exists and is not a directory")
    return p


def chunk_users(n: int | None) -> int | None:
    """Users per mechanism task: an integer >= 1, or None (sized by samples, `tasks.stage`)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ParameterError(f"chunk_users must be an integer >= 1; got {n!r}")
    return n


def release_domain(ledger: Ledger, policy_path: str | os.PathLike[str] | None, name: str,
                   kind: str) -> Domain:
    """The domain a release charges: the ledger's MAC-checked definition, of `kind`.

    The ledger is the source of truth for a domain's kind, notion, metric, units,
    w, cap, projection and public metadata: a release never takes them from a
    file. A `policy_path` given as well is only a cross-check: any key that
    disagrees with the ledger is refused, all of them named.

    Raises:
        ParameterError: the ledger lacks the domain, it holds the other kind, or the
            policy file disagrees with the ledger's definition.
        PolicyError: the policy file is invalid or has no such domain.
    """
    dom = ledger.domain(name)
    if dom.kind != kind:
        raise ParameterError(f"the ledger's domain {name!r} holds {dom.kind}, not {kind}")
    if policy_path is not None:
        differs = policy_disagreement(load_policy(policy_path).domain(name), dom)
        if differs:
            raise ParameterError(
                f"--policy {str(policy_path)!r} disagrees with the ledger's domain {name!r}, "
                "which is what a release charges: " + "; ".join(differs) + ". Apply the "
                "change first (privpipe ledger policy apply FILE refuses changes of units or "
                "metric on a charged domain), or release without --policy")
    return dom


def policy_disagreement(file_domain: Domain, ledger_domain: Domain) -> list[str]:
    """``domains.NAME.key: file X, ledger Y`` for every field the two definitions differ in."""
    out = []
    for f in dataclasses.fields(Domain):
        a, b = getattr(file_domain, f.name), getattr(ledger_domain, f.name)
        if a != b:
            out.append(f"domains.{ledger_domain.name}.{f.name}: file {a!r}, ledger {b!r}")
    return out


def check_mechanism(dom: Domain, mechanism: str) -> registry.Mechanism:
    """The registry entry of `mechanism` if its guarantee is in the domain's metric.

    The one metric check of a release (the CLI, the Python API and the flows
    call it; the ledger keeps its own invariant, `ledger.binding.check_metric`).

    Raises:
        MechanismParameterError: no `dom.kind` mechanism of that name.
        ParameterError: the mechanism's metric is not the domain's (names the
            mechanisms that fit).
    """
    entry = registry.get(mechanism, dom.kind)
    if entry.metric != dom.metric:
        fits = [n for n in registry.names(dom.kind) if registry.get(n).metric == dom.metric]
        raise ParameterError(
            f"mechanism {mechanism!r} is private w.r.t. {entry.metric}, but domain "
            f"{dom.name!r} states its guarantee in {dom.metric} ({dom.units_label()}): no "
            f"budget of this domain covers it; use a {entry.metric} domain or another "
            f"mechanism ({', '.join(fits)})")
    return entry


def check_notion(dom: Domain, notion: str, epsilon_option: str = "epsilon") -> None:
    """Refuse a ρ-CGP charge to an ε-GP domain (`epsilon_option`: how to name ε's option).

    Raises:
        ParameterError: the domain is a GP (ε) domain and `notion` is ``cgp``.
    """
    if notion == "cgp" and dom.notion == "gp":
        raise ParameterError(
            f"domain {dom.name!r} is a GP (ε) domain: a ρ-CGP mechanism cannot be charged "
            f"to it; pass {epsilon_option} instead")


def check_cap(dom: Domain, value: Any, x: Fraction, option: str = "epsilon") -> None:
    """Refuse a per-window ε above the stream domain's cap (`value` as the user gave it).

    Raises:
        ParameterError: `x` (the exact ε) exceeds `dom.cap`.
    """
    if x > dom.cap:
        raise ParameterError(f"{option} {value} per window exceeds the domain's cap "
                             f"{dom.cap} ({dom.units_label()})")


def mechanism_for(dom: Domain, name: str, notion: str,
                  options: dict[str, Any] | None = None) -> registry.Mechanism:
    """The registry entry of `name`, checked against the domain: kind, metric, notion, options.

    The metric check is `check_mechanism`'s. Option values are checked by the
    flow's dry run on a public synthetic curve, still before any budget is
    reserved.

    Raises:
        ParameterError: naming the mechanism and what it cannot do here.
    """
    try:
        entry = registry.get(name, dom.kind)
        entry.check_notion(notion)
        entry.check_options(options or {})
    except MechanismParameterError as err:
        raise ParameterError(str(err)) from None
    return check_mechanism(dom, name)


class _Gather:
    """Runs independent checks, keeping every problem (parameter name, message)."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def run(self, param: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValidationError as err:  # every located problem, one line each
            self.problems += [(param, p.describe()) for p in err.problems] or [(param, str(err))]
            return None
        except BadInputError as err:
            self.problems.append((param, str(err)))
            return None

    def raise_if_any(self) -> None:
        if len(self.problems) == 1:
            raise ParameterError(self.problems[0][1])
        if self.problems:
            raise ParameterError(f"{len(self.problems)} problems:\n"
                                 + "\n".join(f"  - {m}" for _, m in self.problems))


def _opt(name: str, cli: bool) -> str:
    return "--" + name.replace("_", "-") if cli else name


def curves_release_problems(params: dict[str, Any], *, cli: bool = False,
                            read_input: bool = False
                            ) -> tuple[list[tuple[str, str]], CheckedRelease | None]:
    """Every problem of a curve release's parameters (flow parameter names), and the result.

    `params` are `release_curves`' parameters; `cli` names options as ``--epsilon``;
    `read_input` also checks the input file's content (`ingest.check_input`).
    """
    g = _Gather()
    epsilon, rho = params.get("epsilon"), params.get("rho")
    x = None
    if (epsilon is None) == (rho is None):
        g.problems.append(("epsilon", f"give exactly one of {_opt('epsilon', cli)} or "
                                      f"{_opt('rho', cli)}"))
    else:
        which = "epsilon" if epsilon is not None else "rho"
        x = g.run(which, amount, params[which], _opt(which, cli))
    evaluate_on = params.get("evaluate_on", "grid")
    g.run("evaluate_on", choice, evaluate_on, EVALUATE_ON, _opt("evaluate_on", cli))
    ledger, dom = _files_ledger_domain(g, params, cli, "curves", read_input)
    if dom is not None and x is not None:
        notion = "gp" if rho is None else "cgp"
        before = len(g.problems)
        g.run("rho", check_notion, dom, notion, _opt("epsilon", cli))
        if len(g.problems) == before:
            g.run("mechanism", mechanism_for, dom, params.get("mechanism", "privfuncseg"),
                  notion, params.get("options"))
    done = None if g.problems or ledger is None or dom is None or x is None else (
        CheckedRelease(dom, x, ledger))
    return g.problems, done


def streams_release_problems(params: dict[str, Any], *, cli: bool = False,
                             read_input: bool = False
                             ) -> tuple[list[tuple[str, str]], CheckedRelease | None]:
    """Every problem of a stream release's parameters (flow parameter names), and the result.

    `read_input` also checks the input file's content (`ingest.check_input`) and,
    once the rest holds, its continuation of released streams (`continuation_problems`).
    """
    g = _Gather()
    x = g.run("epsilon", amount, params.get("epsilon"), _opt("epsilon", cli))
    g.run("reconstruct", choice, params.get("reconstruct", "cpr"), RECONSTRUCT,
          _opt("reconstruct", cli))
    ledger, dom = _files_ledger_domain(g, params, cli, "streams", read_input)
    if dom is not None and x is not None:
        g.run("epsilon", check_cap, dom, params["epsilon"], x, _opt("epsilon", cli))
        entry = g.run("mechanism", mechanism_for, dom, params.get("mechanism", "square_wave"),
                      "wevent")
        if entry is not None:
            g.run("reconstruct", _reconstruct_for, entry, params.get("reconstruct", "cpr"))
        if read_input and entry is not None and not g.problems and ledger is not None:
            g.run("epsilon", continuation_problems, ledger, dom, params["input_path"],
                  params.get("table"), params["epsilon"], entry.reservation(x, w=dom.w),
                  _opt("epsilon", cli))
    done = None if g.problems or ledger is None or dom is None or x is None else (
        CheckedRelease(dom, x, ledger))
    return g.problems, done


def reconstruct_default(mechanism: str, reconstruct: str | None) -> str:
    """`reconstruct` if given, else the stream mechanism's first reconstruction.

    ``cpr`` for Square Wave; an unknown mechanism gets ``cpr`` here and is
    refused by the mechanism check.
    """
    if reconstruct is not None:
        return reconstruct
    try:
        return registry.stream(mechanism).reconstructions[0]
    except MechanismParameterError:
        return "cpr"


def _reconstruct_for(entry: registry.StreamMechanism, reconstruct: str) -> None:
    try:
        entry.check_reconstruct(reconstruct)
    except MechanismParameterError as err:
        raise ParameterError(str(err)) from None


def _files(g: _Gather, params: dict[str, Any], cli: bool) -> None:
    g.run("chunk_users", chunk_users, params.get("chunk_users"))
    g.run("input_path", input_file, params.get("input_path", ""), params.get("table"))
    g.run("out_dir", out_dir, params.get("out_dir", "out"))


def _files_ledger_domain(g: _Gather, params: dict[str, Any], cli: bool, kind: str,
                         read_input: bool) -> tuple[Ledger | None, Domain | None]:
    """Check the chunking, input and output, open the ledger, read the `kind` domain.

    With `read_input`, the input's file-level checks follow (`ingest.check_input`).
    """
    _files(g, params, cli)
    ledger = g.run("ledger_path", open_ledger, params.get("ledger_path", ".privpipe/ledger.duckdb"))
    dom = None if ledger is None else g.run(
        "domain", release_domain, ledger, params.get("policy_path"), params.get("domain"), kind)
    if read_input and dom is not None and not any(p == "input_path" for p, _ in g.problems):
        from ingest import check_input

        g.run("input_path", check_input, params["input_path"], dom, table=params.get("table"))
    return ledger, dom


def released_streams(ledger: Ledger, dom: Domain, input_path: str | os.PathLike[str],
                     table: str | None) -> dict[Fraction, list[tuple[str, str, Any]]]:
    """The input's streams the ledger released before, by the ε/w they were released at.

    Each value lists (user_id, stream_id, one of its released ranges); a stream
    whose ranges disagree is listed under each ε/w it has. Cost: one read of the
    input's id columns, one ledger read per 200,000 streams.
    """
    from ingest import stream_keys
    from ledger.checks import id_problem

    out: dict[Fraction, list[tuple[str, str, Any]]] = {}
    for keys in stream_keys(input_path, table=table):
        # an id the ledger refuses is never released: its user is rejected by the read
        valid = [(u, s) for u, s in keys if not id_problem(u) and not id_problem(s, True)]
        for key, ranges in ledger.stream_ranges(dom.name, valid).items():
            for eps in dict.fromkeys(r.epsilon_per_step for r in ranges):
                first = next(r for r in ranges if r.epsilon_per_step == eps)
                out.setdefault(eps, []).append((*key, first))
    return out


def continuation_problems(ledger: Ledger, dom: Domain, input_path: str | os.PathLike[str],
                          table: str | None, epsilon: Any, per_step: Fraction,
                          option: str = "--epsilon") -> None:
    """Refuse a stream release that continues streams released at another ε/w.

    A stream's released ranges fix its per-step ε (`tasks.continuation`): a
    release asking another one would reject every such user as invalid input.
    This finds them before anything starts, from the input's (user, stream)
    pairs and the ledger's ranges. Cost: one read of the input's id columns and
    one ledger read per 200,000 streams; nothing is charged.

    Raises:
        ParameterError: naming how many streams conflict, one of them, their ε/w,
            and the two fixes: the ε per window that continues them, or new stream ids.
    """
    other = {eps: found for eps, found in released_streams(ledger, dom, input_path, table).items()
             if eps != per_step}
    if not other:
        return
    n = sum(len(v) for v in other.values())
    lines = []
    for eps, found in sorted(other.items()):
        user, stream, r = found[0]
        fix = f"{option} {eps * dom.w}" if eps > 0 else "new stream ids"
        lines.append(f"{len(found)} at ε/w = {eps} (e.g. user {user!r} stream {stream!r}, "
                     f"steps {r.first_step}-{r.last_step}, release {r.release_id!r}): continue "
                     f"them with {fix}")
    raise ParameterError(
        f"{option} {epsilon} is ε/w = {per_step} per step (w = {dom.w}), but {n} stream(s) of "
        f"this input continue streams of domain {dom.name!r} released at another ε/w, which a "
        "stream keeps: " + "; ".join(lines) + ". Or give the new data new stream ids (a new "
        "stream starts its own windows).")


def _checked(problems: list[tuple[str, str]], done: CheckedRelease | None) -> CheckedRelease:
    g = _Gather()
    g.problems = problems
    g.raise_if_any()
    assert done is not None, "no problem means every check ran"
    return done


def check_curves_release(*, input_path: str | os.PathLike[str], domain: str, mechanism: str,
                         epsilon: Any, rho: Any, out: str | os.PathLike[str],
                         ledger_path: str | os.PathLike[str],
                         policy_path: str | os.PathLike[str] | None = None,
                         table: str | None = None, chunk: int = 200,
                         evaluate_on: str = "grid", options: dict[str, Any] | None = None,
                         task_runner: str = "threads", cli: bool = True) -> CheckedRelease:
    """Every check of a curve release that needs no Prefect: arguments, ledger, domain, input.

    The input's file-level checks (`ingest.check_input`) read it but convert no row.
    `cli` names options as the CLI spells them (``--epsilon``), else as keywords.

    Raises:
        ParameterError: listing every problem found, each naming the option or file.
    """
    task_runner_spec(task_runner)
    return _checked(*curves_release_problems(dict(
        input_path=input_path, domain=domain, mechanism=mechanism, epsilon=epsilon, rho=rho,
        out_dir=out, ledger_path=ledger_path, policy_path=policy_path, table=table,
        chunk_users=chunk, evaluate_on=evaluate_on, options=options), cli=cli, read_input=True))


def check_streams_release(*, input_path: str | os.PathLike[str], domain: str, epsilon: Any,
                          out: str | os.PathLike[str], ledger_path: str | os.PathLike[str],
                          policy_path: str | os.PathLike[str] | None = None,
                          table: str | None = None, chunk: int = 200,
                          reconstruct: str = "cpr", mechanism: str = "square_wave",
                          task_runner: str = "threads", cli: bool = True) -> CheckedRelease:
    """Every check of a stream release that needs no Prefect: arguments, ledger, domain, input.

    The input's file-level checks (`ingest.check_input`) and its continuation of
    released streams (`continuation_problems`) read it but convert no row. `cli`
    as in `check_curves_release`.

    Raises:
        ParameterError: listing every problem found, each naming the option or file.
    """
    task_runner_spec(task_runner)
    return _checked(*streams_release_problems(dict(
        input_path=input_path, domain=domain, epsilon=epsilon, out_dir=out,
        ledger_path=ledger_path, policy_path=policy_path, table=table, chunk_users=chunk,
        reconstruct=reconstruct, mechanism=mechanism), cli=cli, read_input=True))


def abs_head(text: str | os.PathLike[str]) -> str:
    """A kept head (``--expect-head``): ``SEQ:HASH`` as given, a checkpoint file made absolute.

    Absolute so that the run's parameters name the same file wherever it runs again.
    """
    text = str(text)
    if re.fullmatch(r"\d+:[0-9a-fA-F]{64}", text.strip()):
        return text
    return str(Path(text).absolute())
