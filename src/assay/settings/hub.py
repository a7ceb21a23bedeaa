"""A model named as on the Hugging Face Hub (``org/name``, optionally ``@revision``), resolved
offline from the local Hugging Face cache.

Nothing is downloaded: the lookup is ``huggingface_hub.snapshot_download`` with
``local_files_only``, which answers from the cache's ``refs`` and ``snapshots`` folders. A model
that is not cached is one line naming the command that fetches it. A local path always wins: a
reference is a Hub name only when nothing exists at it.
"""

from __future__ import annotations

import re
from pathlib import Path

from assay.errors import ConfigError

# the Hub's repo ids (owner/name; letters, digits, '-', '_', '.'), then an optional revision
_HUB_NAME = re.compile(r"([A-Za-z0-9][\w.-]{0,95})/([\w.-]{1,96})(?:@([\w./-]{1,128}))?")


def hub_name(reference: str, root: Path | None = None) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``reference`` is written as a Hub name and no file or folder
    exists at it (relative to ``root``, a config's folder, else the working directory); None
    otherwise."""
    match = _HUB_NAME.fullmatch(reference)
    local = Path(reference) if root is None else root / reference
    if match is None or local.exists() or ".." in reference.split("/"):
        return None
    return f"{match.group(1)}/{match.group(2)}", match.group(3)


def cached_snapshot(reference: str, where: str, root: Path | None = None) -> Path:
    """The cached snapshot folder of the Hub model ``reference`` (``org/name[@revision]``).

    Raises ConfigError starting with ``where`` when the model (at that revision) is not in the
    local cache, naming the command that fetches it, or when huggingface_hub is absent.
    """
    parsed = hub_name(reference, root)
    if parsed is None:
        raise ConfigError(f"{where}: {reference!r} is not a Hugging Face model name (org/name)")
    repo, revision = parsed
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        raise ConfigError(
            f"{where}: {reference!r} is neither a file nor a folder, and huggingface_hub (to "
            "look it up in the local cache) is not installed"
        ) from None
    try:
        return Path(
            snapshot_download(repo, revision=revision, repo_type="model", local_files_only=True)
        )
    except Exception:  # every "not cached" error of huggingface_hub: none is a network call
        fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
        raise ConfigError(
            f"{where}: {reference!r} is neither a file nor a folder, nor in the local Hugging "
            f"Face cache ({HF_HUB_CACHE}); fetch it with: {fetch}"
        ) from None


def model_argument(reference: str) -> str:
    """A command line's model argument as a path: itself, or, for a Hub name with nothing at
    that path, its cached snapshot (ConfigError naming the fetch command when not cached)."""
    if hub_name(reference) is None:
        return reference
    return str(cached_snapshot(reference, reference))
