"""Export under faults: kill -9 at random filesystem events, a read-only destination and a
full disk. After each, the export folder must be complete (its manifest verifies and the
adapter loads, all from one export) or absent: never a mix of two exports.

Each export's step is visible in its files: lora_B is filled with the step and odd steps are
rsLoRA, even ones LoRA, so a config from one export beside weights from another shows even
without the manifest (the issue's rsLoRA-weights-under-a-LoRA-config case).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import crash

from assay_testing import defects

CHILD = Path(__file__).with_name("export_child.py")
EVENTS = 40  # fsync/rename events of a few exports


def adapted_model(step: int):
    """A tiny decoder with a LoRA (even step) or rsLoRA (odd) whose lora_B holds ``step``."""
    import torch

    from assay.adapters import attach
    from assay.model import Decoder
    from assay_testing.tiny import llama_config

    torch.manual_seed(0)
    model = Decoder(llama_config())
    method = "rslora" if step % 2 else "lora"
    attach(model, method, rank=2, alpha=4, targets=["q_proj", "v_proj"], seed=0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(float(step))
    return model


def export_step(out: Path, step: int) -> Path:
    """Export the adapter of ``step`` to ``out`` as ``assay export --force`` does."""
    from assay.adapters.export import export

    return export(adapted_model(step), out, "peft", force=True)


def folder_step(out: Path) -> int:
    """The step a complete export folder holds; raises if it is mixed, torn or unbound."""
    import torch

    from assay.adapters import load_adapter
    from assay.adapters.manifest import verify_manifest
    from assay.model import Decoder
    from assay_testing.tiny import llama_config

    if verify_manifest(out) is None:
        raise ValueError(f"{out}: no manifest")
    model = load_adapter(Decoder(llama_config()), out)
    values = {float(p.detach().flatten()[0]) for n, p in model.named_parameters() if "lora_B" in n}
    if len(values) != 1:
        raise ValueError(f"{out}: lora_B tensors from different exports {sorted(values)}")
    step = int(values.pop())
    method = model.assay_adapter_spec.method
    if method != ("rslora" if step % 2 else "lora") or not all(
        bool(torch.all(p == step)) for n, p in model.named_parameters() if "lora_B" in n
    ):
        raise ValueError(f"{out}: {method} config beside step-{step} weights")
    return step


@dataclass
class ExportKills:
    """Kills performed, folders found mixed (neither complete nor absent), steps seen."""

    kills: int = 0
    mixed: int = 0
    absent: int = 0
    steps: list[int] = field(default_factory=list)


def kill_trials(out: Path, kills: int, seed: int, *, in_place: bool = False) -> ExportKills:
    """Chain ``kills`` exporting children, each killed -9 at a random filesystem event."""
    rng = random.Random(seed)
    report = ExportKills()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parent), *sys.path])}
    env = defects.child_env("adapters.export.in_place" if in_place else "", env)
    step = 1
    for _ in range(kills):
        kill_at = rng.randint(1, EVENTS)
        process = subprocess.Popen(
            [sys.executable, str(CHILD), str(out), str(step), str(kill_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("SAVED"):
                step = int(line.split()[1]) + 1
            if line.startswith("PAUSE"):
                break
        process.kill()
        process.wait()
        report.kills += 1
        if not out.exists():
            report.absent += 1
            report.steps.append(0)
            continue
        try:
            report.steps.append(folder_step(out))
        except Exception:
            report.mixed += 1
            report.steps.append(-1)
        step += 1
    return report


def fault_trials(root: Path) -> dict[str, int]:
    """Export step 1, then step 2 over it under a read-only parent and a full disk: expect an
    OSError and step 1 intact. Returns {fault: 1 if the folder was lost or mixed}."""
    out = {}
    for fault in ("read_only", "full_disk"):
        parent = root / fault
        parent.mkdir(parents=True)
        target = parent / "adapter"
        export_step(target, 1)
        context = crash.read_only(parent) if fault == "read_only" else crash.full_disk()
        refused = False
        with context:
            try:
                export_step(target, 2)
            except OSError:
                refused = True
        try:
            kept = folder_step(target) == 1
        except Exception:
            kept = False
        out[fault] = int(not (refused and kept))
    return out
