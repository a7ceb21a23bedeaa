"""The box a receipt was measured on: versions, CPU, GPU, relevant variables and code identity.

torch is imported here only lazily (to read its build and resolve ``--gate-device auto``);
everything degrades to ``None`` when a component is absent.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_LAUNCH_BLOCKING",
)


def resolve_device(choice: str) -> str:
    """``cpu`` or ``cuda`` for a ``--gate-device`` choice; ``auto`` is cuda when available."""
    if choice in ("cpu", "cuda"):
        return choice
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


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


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda": None, "cudnn": None, "torch_threads": None}
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cudnn": None if cudnn is None else str(cudnn),
        "torch_threads": torch.get_num_threads(),
    }


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
        probes = {
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


def describe_environment() -> dict[str, Any]:
    """The receipt's ``environment`` object; every field present, unknowns as None."""
    torch_facts = _torch_facts()
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "torch": torch_facts["torch"],
        "cuda": torch_facts["cuda"],
        "cudnn": torch_facts["cudnn"],
        "bitsandbytes": _version("bitsandbytes"),
        "transformers": _version("transformers"),
        "cpu": {
            "model": _cpu_model(),
            "threads": os.cpu_count(),
            "torch_threads": torch_facts["torch_threads"],
        },
        "gpu": _gpu(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
    }


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def describe_code(
    root: Path, files: list[dict[str, str]], package: str = "assay"
) -> dict[str, Any]:
    """The receipt's ``code`` object: git commit and dirty flag of ``root`` (None outside git),
    the installed version of ``package`` and the exercised ``files`` sorted by path."""
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    unique = {f["path"]: f for f in files}
    return {
        "commit": commit.strip() if commit else None,
        "dirty": None if status is None else bool(status.strip()),
        "package_version": _version(package),
        "files": [unique[p] for p in sorted(unique)],
    }
