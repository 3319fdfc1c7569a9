"""Errors the user sees as one line: what is wrong and how to fix it.

Every stage raises one of these instead of letting a library exception escape, so that
the CLI can print a single line and exit with a code a CI job can act on:
2 for bad usage or bad input, 1 for a model that cannot be deployed.
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
