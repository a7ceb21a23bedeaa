"""The errors assay raises for bad input, each one line that names the file and the problem."""

from __future__ import annotations


class AssayError(Exception):
    """Base class for expected, user-facing failures.

    The CLI prints ``str(error)`` on one line and exits with code 2, with no traceback.
    Messages should name the file (or row, field, offset) and what was expected.
    """


class ModelFileError(AssayError):
    """A model file (GGUF or safetensors) is malformed, truncated or inconsistent."""


class UnsupportedModelError(AssayError):
    """A model file is well formed but describes an architecture assay does not support."""


class ConfigError(AssayError):
    """A configuration value is missing, mistyped or impossible."""


class DivergedError(AssayError):
    """A training step's gradients or loss are not finite: the run stops there, the step is not
    logged and no checkpoint is written after the last good one."""
