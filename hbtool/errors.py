"""Errors the user sees as one line: what is wrong and how to fix it.

Every stage raises one of these instead of letting a library exception escape, so that
the CLI can print a single line and exit with a code a CI job can act on:
2 for bad usage or bad input, 1 for a model that cannot be deployed, 4 for a gate the result
failed (3 is an internal error, which is not an HbError).
"""

from __future__ import annotations


class HbError(Exception):
    """Base class: ``problem`` says what is wrong, ``fix`` says what to do about it."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        if self.fix:
            return f"{self.problem}; fix: {self.fix}"
        return self.problem

    def stderr_lines(self) -> list[str]:
        """What the CLI prints on stderr for this error."""
        return [f"hbtool: error: {self.one_line()}"]


class InputError(HbError):
    """Bad input: a file, a flag, data or a model the user gave us is wrong (exit 2)."""

    exit_code = 2


class ConfigError(InputError):
    """A YAML config problem; the message starts with the key path (exit 2)."""


class ModelError(InputError):
    """The model file cannot be read or imported as given (exit 2)."""


class NotDeployableError(HbError):
    """The model is valid but cannot be put on the accelerator (exit 1)."""

    exit_code = 1


class GateFailed(HbError):
    """The run worked but its result failed a gate the user set (exit 4): a CI job's "model got worse".

    ``failures`` are one line each, ``key: measured < limit``; the CLI prints each as
    ``hbtool: gate failed: <line>``, so a job log names every failed gate, not only the first."""

    exit_code = 4

    def __init__(self, failures: list[str], fix: str | None = None):
        self.failures = list(failures)
        super().__init__("; ".join(self.failures) or "a gate failed", fix)

    def stderr_lines(self) -> list[str]:
        return [f"hbtool: gate failed: {line}" for line in self.failures]
