"""What a finished release means to a scheduler: its Prefect state and exit code.

- Some user released: the run is Completed and the CLI exits 0, printing the
  counts (a partial denial is a success with a count, not an error); the
  state's message gives the counts (`counts_line`), and a release with denied
  users is a Completed state named ``Partial``.
- No user released, and some were denied because of budget: the run ends in a
  Failed state named ``Denied`` whose message gives the counts; the CLI exits 3.
- No user released and none denied (every user rejected by validation, or an
  empty input): a Failed state named ``Rejected``; the CLI exits 2.

In both failure cases the release's files (report, manifest) are written and
the ledger records the denials, exactly as for a partial release; the result
travels with the error (`ReleaseNotMadeError.result`).
"""

from __future__ import annotations

from typing import Any

from reports.release_sections import WITHHELD
from schemas.errors import EXIT_BAD_INPUT, EXIT_DENIED, PrivpipeError


class ReleaseNotMadeError(PrivpipeError):
    """No user was released; `result` holds the release's report, manifest and counts."""

    def __init__(self, message: str, result: dict[str, Any], exit_code: int):
        super().__init__(message)
        self.result = result
        self.exit_code = exit_code


def rejection_counts(public: bool, users: int, rejected: int) -> dict[str, int]:
    """The manifest's ``users_in_input`` and ``users_rejected``, or nothing.

    How many users validation rejected is a function of raw data (and so is
    the input's user count, which adds it to the released and denied users):
    published only when the domain declares ``public.rejections = true``.
    """
    return {"users_in_input": users + rejected, "users_rejected": rejected} if public else {}


def counts_line(counts: dict[str, Any]) -> str:
    """``"2 of 6 users released; 3 denied (budget); 1 rejected (invalid input)"``.

    Without published rejection counts (``public.rejections = false``):
    ``"2 users released; 3 denied (budget); rejected (invalid input): not published"``.
    """
    if "users_rejected" not in counts:
        return (f"{counts.get('users_released', 0)} users released; "
                f"{counts.get('users_denied', 0)} denied (budget); "
                f"rejected (invalid input): {WITHHELD}")
    total = counts.get("users_in_input", 0)
    return (f"{counts.get('users_released', 0)} of {total} users released; "
            f"{counts.get('users_denied', 0)} denied (budget); "
            f"{counts.get('users_rejected', 0)} rejected (invalid input)")


def release_state(result: dict[str, Any]) -> Any:
    """The flow's return value: `result` itself, or a Failed state carrying it.

    Args:
        result: what a release returns (``release_id``, ``manifest`` with ``counts``, ...).
    """
    if result.get("dry_run"):
        return result  # a forecast: the caller reads its counts (flows/dry_run.py)
    counts = result["manifest"]["counts"]
    if counts["users_released"] > 0:
        from prefect.states import Completed

        # a partial denial is a success, told apart by the state's name
        name = "Partial" if counts["users_denied"] > 0 else "Completed"
        return Completed(name=name, data=result,
                         message=f"release {result['release_id']}: {counts_line(counts)}")
    from prefect.states import Failed

    line = f"release {result['release_id']}: {counts_line(counts)}"
    if counts["users_denied"] > 0:
        name, code = "Denied", EXIT_DENIED
        message = f"{line}: nobody fits the remaining budget; report: {result['report']}"
    else:
        name, code = "Rejected", EXIT_BAD_INPUT
        message = f"{line}: no valid user in the input; report: {result['report']}"
    return Failed(name=name, message=message, data=ReleaseNotMadeError(message, result, code))
