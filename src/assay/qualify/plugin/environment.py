"""The box a receipt was measured on: versions, CPU, GPU, relevant variables and code identity.

Nothing here imports torch on its own: the torch/CUDA/NVML facts are read when the session
already imported torch (the project under test uses it), or when a project asks for them
through the ``pytest_gate_environment`` hook (assay's gates/conftest.py does). Everything
degrades to ``None`` when a component is absent.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay import DISTRIBUTION
from assay.bounded import parse_json
from assay.errors import AssayError
from assay.qualify.core.git import git_output

if TYPE_CHECKING:
    from collections.abc import Callable

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_LAUNCH_BLOCKING",
)


def cuda_seen() -> bool:
    """True when this process's torch (imported by the project under test; never imported
    here) sees at least one CUDA device. Labels come from what ran: without it, nothing is
    labelled cuda, whatever an option says."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # a broken CUDA install: nothing was seen
        return False


def device_seen(kind: str) -> bool:
    """True when this process could have put tensors on a device of type ``kind``: always for
    ``cpu``; for ``cuda``, ``mps`` and ``xpu`` only when the process's torch sees one. Any other
    name is no device torch knows, so never seen."""
    if kind == "cpu":
        return True
    if kind == "cuda":
        return cuda_seen()
    torch = sys.modules.get("torch")
    backend = {"mps": ("backends", "mps"), "xpu": ("xpu",)}.get(kind)
    if torch is None or backend is None:
        return False
    try:
        found = torch
        for name in backend:
            found = getattr(found, name)
        return bool(found.is_available())
    except Exception:  # an absent or broken backend: nothing was seen
        return False


def resolve_device(choice: str | None) -> str:
    """``cpu`` or ``cuda`` for a ``--gate-device`` choice: ``cuda`` only when this process
    sees a CUDA device (:func:`cuda_seen`), whether it was asked for (``cuda``) or chosen
    (``auto``, or None: the option was not given); otherwise ``cpu``."""
    if choice == "cpu":
        return "cpu"
    return "cuda" if cuda_seen() else "cpu"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def torch_stack() -> dict[str, Any]:
    """torch, CUDA, cuDNN, torch threads and (when torch sees CUDA) the NVML GPU facts, as
    ``pytest_gate_environment`` fields; imports torch. Empty when torch is not installed."""
    try:
        import torch
    except ImportError:
        return {}
    try:
        # torch.backends.cudnn's functions carry no annotations in torch's own typing
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None  # type: ignore[no-untyped-call]
        threads = torch.get_num_threads()
        found = {
            "torch": _plain(torch.__version__),
            "cuda": _plain(torch.version.cuda),
            "cudnn": _plain(cudnn),
            "torch_threads": threads if isinstance(threads, int) else None,
            "gpu": _gpu() if cuda_seen() else None,
        }
    except Exception:  # a stub or a broken install (a test's mock): describe what can be
        return {"torch": _plain(getattr(torch, "__version__", None))}
    return found


def _plain(value: Any) -> str | None:
    """A version as text; None for what is not a plain string or number (a stub's attribute)."""
    plain = isinstance(value, (str, int)) and not isinstance(value, bool)
    return str(value) if plain else None


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver or no GPU: NVML raises its own error types
        return None
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)
        facts: dict[str, Any] = {"name": _as_str(pynvml.nvmlDeviceGetName(handle))}
        probes: dict[str, Callable[[], Any]] = {
            "compute_capability": lambda: "{}.{}".format(
                *pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            ),
            "memory_bytes": lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            "driver": lambda: _as_str(pynvml.nvmlSystemGetDriverVersion()),
            "sm_clock_mhz": lambda: int(
                pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            ),
            "sm_clock_max_mhz": lambda: int(
                pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
            ),
        }
        for key, probe in probes.items():
            try:
                facts[key] = probe()
            except Exception:  # one unsupported query must not hide the others
                facts[key] = None
        return facts
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


TOP_LEVEL = ("torch", "cuda", "cudnn", "bitsandbytes", "transformers", "gpu")


def load_per_thread() -> float | None:
    """The 1-minute load average over the CPU threads now (None where the system has none):
    how busy the machine was, so that timings are compared only between like runs."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 3)
    except (OSError, AttributeError):
        return None


def describe_environment(
    contributions: list[dict[str, Any]] | None = None, *, load: float | None = None
) -> dict[str, Any]:
    """The receipt's ``environment`` object; every required field present, unknowns as None.
    ``load`` is :func:`load_per_thread` as the session started (None: not taken).

    ``contributions`` are the ``pytest_gate_environment`` hook results: the fields named in
    ``TOP_LEVEL`` (and ``torch_threads``) fill the standard slots, any other field goes to
    ``stack`` as text. torch is described without a hook only if it is already imported.
    """
    merged: dict[str, Any] = torch_stack() if "torch" in sys.modules else {}
    for extra in contributions or []:
        merged.update(extra or {})
    stack = {
        k: None if v is None else str(v)
        for k, v in merged.items()
        if k not in TOP_LEVEL and k != "torch_threads"
    }
    env: dict[str, Any] = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        **{k: merged.get(k) for k in TOP_LEVEL},
        "cpu": {
            "model": _cpu_model(),
            "threads": os.cpu_count(),
            "torch_threads": merged.get("torch_threads"),
            "load_per_thread": load,
        },
        "env": {name: os.environ.get(name) for name in ENV_VARS},
    }
    if stack:
        env["stack"] = dict(sorted(stack.items()))
    return env


def tree_state(root: Path) -> dict[str, Any]:
    """The git state of ``root`` now: commit, whether tracked files differ from it, and the
    set of untracked paths. Taken before a session writes anything, so the records and
    receipts it writes cannot make its own receipts dirty."""
    commit = git_output(root, "rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "changed": None, "untracked": []}
    status = git_output(root, "status", "--porcelain", "--untracked-files=all") or ""
    lines = [line for line in status.splitlines() if line.strip()]
    top = (git_output(root, "rev-parse", "--show-toplevel") or str(root)).strip()
    prefix = Path(top).resolve()
    untracked = []
    for line in lines:
        if line.startswith("?? "):
            path = (prefix / line[3:].strip().strip('"')).resolve()
            try:
                untracked.append(path.relative_to(Path(root).resolve()).as_posix())
            except ValueError:
                untracked.append(path.as_posix())
    return {
        "commit": commit.strip(),
        "changed": any(not line.startswith("?? ") for line in lines),
        "untracked": sorted(untracked),
    }


def provenance_state(path: Path) -> dict[str, Any]:
    """A :func:`tree_state` for a tree without ``.git`` (a GPU box): commit, dirty flag and tree
    sha256 from the JSON at ``path``, which the kit wrote from its manifest after checking the
    travelled files. AssayError names the file and field when it is not that."""

    try:
        data = parse_json(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as err:
        raise AssayError(f"{path}: provenance not readable as JSON ({err})") from None
    if not isinstance(data, dict):
        raise AssayError(f"{path}: expected a JSON object {{commit, dirty, tree_sha256}}")
    commit, dirty = data.get("commit"), data.get("dirty")
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40,64}", commit):
        raise AssayError(f"{path}: commit: expected a 40-64 hex digit git commit, got {commit!r}")
    if not isinstance(dirty, bool):
        raise AssayError(f"{path}: dirty: expected true or false, got {dirty!r}")
    state = {"commit": commit, "changed": dirty, "untracked": [], "source": "kit manifest"}
    tree = data.get("tree_sha256")
    if tree is not None:
        if not isinstance(tree, str) or not re.fullmatch(r"[0-9a-f]{64}", tree):
            raise AssayError(f"{path}: tree_sha256: expected 64 hex digits, got {tree!r}")
        state["tree_sha256"] = tree
    return state


def describe_code(
    root: Path,
    files: list[dict[str, str]],
    package: str = DISTRIBUTION,
    tree: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The receipt's ``code`` object: git commit and dirty flag of ``root`` (None outside git),
    the installed version of ``package`` (the gate plugin's) and the exercised ``files``
    sorted by path. ``tree`` is :func:`tree_state` taken at session start (taken now if None).
    Dirty means a tracked file differed from the commit, or a hashed file was untracked
    (``untracked_files`` counts those); other untracked files do not count."""
    state = tree if tree is not None else tree_state(root)
    unique = {f["path"]: f for f in files}
    code: dict[str, Any] = {
        "commit": state["commit"],
        "dirty": None,
        "package_version": _version(package),
        "files": [unique[p] for p in sorted(unique)],
    }
    if state["commit"] is not None:
        untracked = set(state["untracked"])
        hashed_untracked = sum(p in untracked for p in unique)
        code["dirty"] = bool(state["changed"]) or hashed_untracked > 0
        code["untracked_files"] = hashed_untracked
        if state.get("source"):  # absent: git
            code["commit_source"] = state["source"]
        if state.get("tree_sha256"):
            code["tree_sha256"] = state["tree_sha256"]
    return code


def _pyproject(root: Path) -> tuple[str | None, str | None]:
    path = root / "pyproject.toml"
    if not path.is_file():
        return None, None
    text = path.read_text("utf-8", errors="replace")
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            project = tomllib.loads(text).get("project", {})
        except ValueError:
            return None, None
        return project.get("name"), project.get("version")
    # Python 3.10 has no tomllib: the two keys of [project] read by hand
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    body = section.group(1) if section else ""
    name, version = (
        re.search(rf'^{key}\s*=\s*"([^"]*)"', body, re.M) for key in ("name", "version")
    )
    return (name.group(1) if name else None), (version.group(1) if version else None)


def describe_subject(root: Path, override: str | None = None) -> dict[str, Any]:
    """The project under test (see :mod:`assay.qualify.plugin.subject`): named by the ini
    ``gate_project`` (``name`` or ``name==version``) when set, else by ``[project]`` of the
    rootdir's pyproject.toml; identified by what the gates imported, with the declared
    version kept beside it when they differ."""
    from assay.qualify.plugin.subject import imported_identity

    name: str | None
    if override:
        name, _, version = override.partition("==")
        name, declared, source = name.strip(), version.strip() or None, "ini gate_project"
        in_tree, tree_version = _pyproject(root)
        if declared and in_tree == name and tree_version and tree_version != declared:
            source += f", while pyproject.toml declares {tree_version}"
    else:
        name, declared = _pyproject(root)
        source = "pyproject.toml" if name else "none"
    if not name:
        return {"name": None, "version": None, "source": source}
    return imported_identity(name, declared, source)
