"""The error family that reaches users, with the CLI's exit codes.

Every error here carries text a person can act on and never raw data values.
The CLI maps each class to one documented exit code and prints one line.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_DENIED = 3
EXIT_INTEGRITY = 4


class PrivpipeError(Exception):
    """Base class of every error privpipe shows to a user."""

    exit_code = EXIT_INTERNAL


class BadInputError(PrivpipeError):
    """Input (file, argument, policy) is wrong; nothing was charged."""

    exit_code = EXIT_BAD_INPUT


@dataclass(frozen=True)
class Problem:
    """One rule violation, located in the input.

    Attributes:
        file: input file (or table) name.
        row: 1-based data row number (header excluded), or None for file-level rules.
        column: column name, or None when the rule is about the whole row or file.
        rule: short rule name, e.g. ``"finite"``, ``"t strictly increasing"``.
        message: what is wrong and what to do, without the offending value.
        user_id: the user the row belongs to, when known.
        value: the offending value (only shown by ``validate --show-values``).
    """

    file: str
    row: int | None
    column: str | None
    rule: str
    message: str
    user_id: str | None = None
    value: str | None = None

    def describe(self, show_values: bool = False) -> str:
        """One line naming file, row, column and rule."""
        where = self.file
        if self.row is not None:
            where += f", row {self.row}"
        if self.column is not None:
            where += f", column {self.column!r}"
        text = f"{where}: rule {self.rule!r}: {self.message}"
        if show_values and self.value is not None:
            text += f" (value: {self.value})"
        return text


class ValidationError(BadInputError):
    """Input data or a policy broke a rule; `problems` locates each violation."""

    def __init__(self, problems: list[Problem] | Problem, summary: str | None = None):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        first = self.problems[0].describe() if self.problems else "invalid input"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(summary or first + more)


class PolicyError(ValidationError):
    """The policy file is invalid; the message names the key and the allowed values."""


class ParameterError(BadInputError, ValueError):
    """A flow or CLI parameter is invalid (e.g. ε <= 0, unknown domain)."""


class FileSystemError(BadInputError):
    """A file privpipe must write cannot be written safely: no space left, or a path in the way.

    The message names the path and what to do; nothing half-written is left visible.
    """


class OutputIntegrityError(PrivpipeError):
    """A release directory does not match the manifest the ledger holds for it.

    Raised when a rerun finds ``OUT/<release_id>/`` changed after it was published
    (a file edited, added, removed or replaced by a symlink), or finds a directory
    there that this ledger never published. Nothing is written into it.
    """

    exit_code = EXIT_INTEGRITY
