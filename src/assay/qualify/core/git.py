"""git as the framework runs it: history as committed (replace objects and grafts ignored), a
bounded wait, and a one-phrase reason when git cannot answer. The one home of every git call
in :mod:`assay.qualify`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Literal, cast, overload

GIT_TIMEOUT_S = 60


class GitFailed(Exception):
    """git could not answer: not installed, too slow, or it exited with a code not accepted.
    The message says which, in one phrase (``git log failed: <its first stderr line>``)."""


def git_env() -> dict[str, str]:
    """The environment for reading git history as committed: replace objects and grafts
    (``git replace --graft``), which can hide commits from every reader, are ignored."""
    return {**os.environ, "GIT_NO_REPLACE_OBJECTS": "1", "GIT_GRAFT_FILE": os.devnull}


@overload
def run_git(
    root: Path,
    *args: str,
    stdin: bytes | str | None = None,
    config: tuple[str, ...] = (),
    ok: tuple[int, ...] = (0,),
    timeout: float = GIT_TIMEOUT_S,
    text: Literal[False] = False,
) -> bytes: ...


@overload
def run_git(
    root: Path,
    *args: str,
    stdin: bytes | str | None = None,
    config: tuple[str, ...] = (),
    ok: tuple[int, ...] = (0,),
    timeout: float = GIT_TIMEOUT_S,
    text: Literal[True],
) -> str: ...


def run_git(
    root: Path,
    *args: str,
    stdin: bytes | str | None = None,
    config: tuple[str, ...] = (),
    ok: tuple[int, ...] = (0,),
    timeout: float = GIT_TIMEOUT_S,
    text: bool = False,
) -> bytes | str:
    """git's stdout for ``args`` run in ``root`` (history as committed, :func:`git_env`), fed
    ``stdin``, with ``-c`` settings ``config`` (``"core.quotepath=off"``); bytes, or str with
    ``text``. :class:`GitFailed` when git is missing, takes over ``timeout`` seconds or exits
    with a code not in ``ok``."""
    argv = ["git", *(part for setting in config for part in ("-c", setting)), *args]
    try:
        done = subprocess.run(
            argv,
            cwd=root,
            env=git_env(),
            input=stdin,
            capture_output=True,
            text=text,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as err:
        raise GitFailed("git is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise GitFailed(f"git {args[0]} took over {timeout} s") from err
    if done.returncode not in ok:
        stderr = done.stderr if text else done.stderr.decode("utf-8", "replace")
        message = stderr.strip().splitlines()
        raise GitFailed(f"git {args[0]} failed: {message[0] if message else done.returncode}")
    # subprocess.run's stubs type stdout as Any when text is not a literal
    return cast("bytes | str", done.stdout)


def git_output(
    root: Path, *args: str, stdin: str | None = None, ok: tuple[int, ...] = (0,)
) -> str | None:
    """:func:`run_git` as text, waiting 20 s at most; None when git cannot answer."""
    try:
        return run_git(root, *args, stdin=stdin, ok=ok, timeout=20, text=True)
    except (GitFailed, OSError, subprocess.SubprocessError):
        return None
