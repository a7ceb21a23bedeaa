"""gate-resume: a run stopped at step k and resumed in a NEW process ends bitwise where a run
straight through ends, and a kill -9 during a save never costs the last good checkpoint.

Every run is a real ``assay train`` process. NEFTune noise (alpha 5) is on, so the training
draws from torch's RNG and a resume that lost the RNG state would show.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from assay.qualify import Threshold
from assay_testing import defects
from assay_testing.real_model import smollm2_reference
from assay_testing.tiny import FAMILIES as TINY_FAMILIES

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "resume.lora-float32"

IMPLEMENTATION = (
    "assay.train.loop",
    "assay.train.checkpoint.directory",
    "assay.train.checkpoint.state",
    "assay.train.build",
    "assay.train.data.dataset",
    "assay.atomic",
    "assay.cli",
    "assay.cli.train",
)
TEXT = [
    "Streaming keeps two layers on the device at a time.",
    "NF4 stores four bits per weight and a scale per block of 64.",
    "A gate is a claim, a measurement and a control that can fail.",
    "Exact resume means the loss sequence is bitwise equal.",
    "The reference policy is the same model with its adapters disabled.",
    "Checkpoints are written to a temp dir, fsynced and renamed.",
]
HELD_OUT = [
    "Tokens per second are quoted with the same-session ceiling.",
    "Nothing published is ever rewritten; corrections stand beside it.",
]
STEPS, STOP = 4, 2
COMBOS = (
    ("lora", "float32"),
    ("lora", "nf4_double_quant"),
    ("lora_fa", "float32"),
    ("lora_fa", "nf4_double_quant"),
    ("tinylora", "float32"),
    ("tinylora", "nf4_double_quant"),
    ("full", "float32"),
    ("loraplus", "float32"),
)
COMPARED = (
    "trainables.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "scheduler.json",
    "cursor.json",
)


def run(
    args: list[str], check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=False, env=env
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def train(config: Path, *extra: str) -> dict:
    return json.loads(run(["-m", "assay.cli", "train", str(config), "--json", *extra]).stdout)


def python(code: str) -> dict:
    return json.loads(run(["-c", code]).stdout.strip().splitlines()[-1])


def write_config(
    root: Path,
    name: str,
    method: str,
    storage: str,
    model: str | None = None,
    seq_len: int = 64,
    **extra,
) -> Path:
    """A run config of ``method`` over ``storage`` (SmolLM2 unless ``model`` names another)."""
    adapter = {"method": method}
    if method in ("lora", "lora_fa", "loraplus"):
        adapter.update(rank=4, alpha=8, targets=["q_proj", "v_proj"])
    elif method == "tinylora":
        adapter.update(u=13, r=2, targets=["q_proj", "v_proj"])
    config = {
        "model": model or smollm2_reference(),
        "storage": storage,
        "adapter": adapter,
        "data": {
            "train": str(root / "train.jsonl"),
            "eval": str(root / "eval.jsonl"),
            "format": "text",
            "seq_len": seq_len,
        },
        "optim": {
            "lr": 1e-5 if method == "full" else 1e-3,
            "schedule": "cosine",
            "warmup_steps": 1,
        },
        "batch": {"micro_batch": 2},
        "steps": STEPS,
        "seed": 7,
        "neftune_alpha": 5.0,
        "output": {"dir": str(root / name), "save_every": 100},
        **extra,
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def file_digests(step_dir: Path) -> dict[str, str]:
    return {n: hashlib.sha256((step_dir / n).read_bytes()).hexdigest() for n in COMPARED}


def differences(a: Path, b: Path) -> list[str]:
    left, right = file_digests(a), file_digests(b)
    return [name for name in COMPARED if left[name] != right[name]]


def differing_items(first: dict, resumed: dict, straight: dict, a: Path, b: Path) -> int:
    """What a stopped-then-resumed run (``first`` then ``resumed``, its last step in ``b``)
    differs in from a straight one (``straight``, in ``a``): 1 for the loss sequence, plus each
    compared checkpoint file."""
    return int(first["losses"] + resumed["losses"] != straight["losses"]) + len(differences(a, b))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("resume")
    (path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXT))
    (path / "eval.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in HELD_OUT))
    return path


@pytest.mark.parametrize(("method", "storage"), COMBOS)
def test_exact_resume_in_a_new_process(gate, root, method, storage):
    name = f"{method}-{storage}"
    straight = train(write_config(root, f"{name}-straight", method, storage))
    split_config = write_config(root, f"{name}-split", method, storage)
    first = train(split_config, "--stop-at", str(STOP))
    second = train(split_config, "--resume", str(root / f"{name}-split"))
    final = f"step-{STEPS:06d}"
    claim = gate.claim(
        f"resume.{name}",
        f"SmolLM2 {method} over {storage}: {STOP} steps, stop, resume in a new process, "
        f"{STEPS - STOP} more == {STEPS} straight: loss sequence, trainables, optimizer "
        f"state, scheduler and data cursor bitwise equal",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing items",
        code=IMPLEMENTATION,
    )
    straight_final = root / f"{name}-straight" / final
    claim.measure(
        differing_items(first, second, straight, straight_final, root / f"{name}-split" / final)
    )
    # (label, the defect armed during the resume, code run after it)
    controls = [
        ("resume that drops the RNG state", "train.checkpoint.directory.rng_not_restored", "")
    ]
    if method == "lora" and storage == "float32":
        controls.append(
            (
                "resume that re-initialises the optimizer",
                "train.checkpoint.directory.optimizer_not_restored",
                "",
            )
        )
        # The wrong RNG state, not a missing one: torch's stream one draw ahead of the saved
        # state. NEFTune draws from it every step, so the resumed run must diverge.
        controls.append(("torch RNG restored one draw off", "", "torch.rand(1); "))
    if method == "loraplus":  # B's group trains at lr_ratio x the schedule's lr
        controls.append(
            (
                "resume that sets the schedule's lr on every group",
                "train.loop.resume_one_lr_for_all_groups",
                "",
            )
        )
    for index, (label, fault, after) in enumerate(controls):
        control_dir = root / f"{name}-control-{index}"
        shutil.copytree(
            root / f"{name}-split" / f"step-{STOP:06d}", control_dir / f"step-{STOP:06d}"
        )
        (control_dir / "latest").write_text(f"step-{STOP:06d}\n")
        config = write_config(root, control_dir.name, method, storage)
        code = (
            "import json, torch; from assay.settings.loader import load_train_config; "
            "from assay.train.loop import Trainer; from assay_testing import defects; "
            f"t = Trainer(load_train_config({str(config)!r}), progress=False); "
            f"torch.manual_seed(999); armed = defects.arm({fault!r}); "
            f"t.resume({str(control_dir)!r}); armed.close(); {after}"
            "import numpy, random; "
            "state = lambda: (numpy.random.get_state()[1].tobytes(), random.getstate()); "
            "before = state(); r = t.train(); r['others_drawn'] = state() != before; "
            "print(json.dumps(r))"
        )
        resumed = python(code)
        claim.control(
            label, differing_items(first, resumed, straight, straight_final, control_dir / final)
        )
        drawn_elsewhere = resumed["others_drawn"]
    gate.note(
        f"{name}: during the resumed steps the numpy and python RNG streams were "
        f"{'drawn from' if drawn_elsewhere else 'never drawn from'}; only torch's stream "
        "(NEFTune) ties training to the restored RNG state, so the other two are checked "
        "directly by rng.restore_exact"
    )
    gate.note(
        f"{name}: losses {', '.join(f'{x:.5f}' for x in straight['losses'])}; held-out "
        f"loss after {STEPS} steps {straight['eval_loss']:.5f}"
    )


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_exact_resume_every_family(gate, root, family, tmp_path):
    """Issue 51: full fine-tuning trains every base tensor a family has (Qwen2's biases,
    Qwen3's q and k norms), so its resume restores them all or the final state differs."""
    from assay_testing.byte_tokenizer import save_byte_tokenizer
    from assay_testing.tiny import save_tiny

    index = TINY_FAMILIES.index(family)
    gate.seed(7, index)
    folder = save_tiny(family, tmp_path, seed=index, gguf=False)["hf"]
    tokenizer = str(save_byte_tokenizer(tmp_path / "bytes.gguf"))
    name = f"{family}-full"

    def config(run: str) -> Path:
        # the byte tokenizer cuts the texts into up to 70 tokens
        return write_config(
            root, run, "full", "float32", model=str(folder), seq_len=96, tokenizer=tokenizer
        )

    straight = train(config(f"{name}-straight"))
    first = train(config(f"{name}-split"), "--stop-at", str(STOP))
    # the control resumes a copy of the stopped run with the optimizer state dropped
    control_dir = root / f"{name}-control"
    shutil.copytree(root / f"{name}-split", control_dir)
    second = train(config(f"{name}-split"), "--resume", str(root / f"{name}-split"))
    final = f"step-{STEPS:06d}"
    claim = gate.claim(
        f"resume.family.{family}",
        f"tiny {family}, full fine-tuning over float32: {STOP} steps, stop, resume in a new "
        f"process, {STEPS - STOP} more == {STEPS} straight: loss sequence, trainables, "
        "optimizer state, scheduler and data cursor bitwise equal",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="differing items",
        code=IMPLEMENTATION,
    )
    straight_final = root / f"{name}-straight" / final
    claim.measure(
        differing_items(first, second, straight, straight_final, root / f"{name}-split" / final)
    )
    resume = ["--json", "--resume", str(control_dir)]
    resumed = json.loads(
        run(
            ["-m", "assay.cli", "train", str(config(control_dir.name)), *resume],
            env=defects.child_env("train.checkpoint.directory.optimizer_not_restored"),
        ).stdout
    )
    claim.control(
        "resume that re-initialises the optimizer",
        differing_items(first, resumed, straight, straight_final, control_dir / final),
    )


def test_held_out_loss_before_and_after(gate, root):
    config = write_config(root, "heldout", "lora", "float32")
    before = json.loads(run(["-m", "assay.cli", "eval", str(config), "--json"]).stdout)
    after = train(config)
    gate.note(
        f"Held-out loss on {len(HELD_OUT)} sentences: {before['eval_loss']:.5f} before, "
        f"{after['eval_loss']:.5f} after {STEPS} LoRA steps on {len(TEXT)} sentences. This "
        "shows the run executes and moves the loss; a set this small says nothing about "
        "quality."
    )
    gate.not_tested("training quality", "a 6-sentence set proves execution, not quality")
    gate.not_tested("CUDA RNG state across resume", "no GPU in this run")


def test_kill_during_saves_never_loses_the_last_checkpoint(gate, tmp_path):
    from assay.train.checkpoint.directory import load_checkpoint
    from assay_testing.tiny import save_tiny

    model = save_tiny("llama3", tmp_path, seed=1, gguf=False, vocab_size=49152)["hf"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXT))
    (tmp_path / "eval.jsonl").write_text((tmp_path / "train.jsonl").read_text())
    steps = 30

    def config(name: str) -> Path:
        return write_config(
            tmp_path,
            name,
            "lora",
            "float32",
            model=str(model),
            tokenizer=smollm2_reference(),
            steps=steps,
            output={"dir": str(tmp_path / name), "save_every": 1},
        )

    train(config("reference"))
    reference = tmp_path / "reference" / f"step-{steps:06d}"
    child = Path(__file__).parent / "support" / "resume" / "child.py"
    rng = random.Random(11)
    chain = tmp_path / "killed"
    kills, unloadable, steps_seen = 12, 0, []
    for _ in range(kills):
        # A save performs about a dozen fsync/rename/replace events; pick one in the first few
        # saves of this process, so every kill lands inside a save.
        kill_at = rng.randint(1, 40)
        process = subprocess.Popen(
            [sys.executable, str(child), str(config("killed")), str(chain), str(kill_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for line in process.stdout:
            if line.startswith("PAUSE"):
                break
        process.kill()
        process.wait()
        if not (chain / "latest").exists():  # killed inside the run's first save: no
            steps_seen.append(0)  # checkpoint was pointed to yet, so none can be lost
            continue
        try:
            steps_seen.append(load_checkpoint(chain).step)
        except Exception:  # any failure to load the last good checkpoint is the defect
            unloadable += 1
    finish = run([str(child), str(config("killed")), str(chain), "0"])
    assert "DONE" in finish.stdout
    wrong_end = int(bool(differences(reference, chain / f"step-{steps:06d}")))
    claim = gate.claim(
        "crash.kill9_during_save",
        f"{kills} kill -9s, each at a random fsync/rename inside a save of a real training "
        "process that saves every step, chained (each process resumes from what the last one "
        "left): once a checkpoint is pointed to, the latest always loads, and the chain ends "
        "bitwise where an unkilled run ends",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="failures",
        code=IMPLEMENTATION,
    )
    claim.measure(unloadable + wrong_end)
    gate.note(f"checkpoint step after each kill: {steps_seen}")
    broken = tmp_path / "broken"
    shutil.copytree(chain, broken)
    latest = broken / (broken / "latest").read_text().strip()
    tensors = latest / "trainables.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-64])  # what a non-atomic, torn save leaves
    torn = run(
        ["-m", "assay.cli", "train", str(config("broken")), "--resume", str(broken), "--json"],
        check=False,
    )
    torn_failures = int(torn.returncode != 0)
    if not torn_failures:
        torn_failures = int(bool(differences(reference, broken / f"step-{steps:06d}")))
    claim.control("a torn save (truncated tensor file behind 'latest')", torn_failures)
    gate.note(f"the torn control was refused with: {torn.stderr.strip().splitlines()[-1]}")


def test_rng_streams_restore_exactly(gate):
    """Every RNG stream a checkpoint saves comes back exactly: the next draws after restore
    equal the draws right after capture, even from a process whose streams moved on."""
    import numpy as np
    import torch

    from assay.train.checkpoint.state import capture_rng, restore_rng

    gate.seed(1, 2, 3)
    streams = {
        "torch": lambda: torch.rand(8).tolist(),
        "numpy": lambda: np.random.random(8).tolist(),
        "python": lambda: [random.random() for _ in range(8)],
    }
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    tensors, meta = capture_rng()
    expected = {k: draw() for k, draw in streams.items()}

    def differing(off_by_one: str | None = None) -> int:
        torch.manual_seed(999)
        np.random.seed(999)
        random.seed(999)
        restore_rng(tensors, meta, "gate")
        if off_by_one is not None:
            streams[off_by_one]()  # the wrong state: one draw past the saved one
        return sum(draw() != expected[k] for k, draw in streams.items())

    claim = gate.claim(
        "rng.restore_exact",
        "torch CPU, numpy and python RNG streams: after restore_rng into a process whose "
        "streams were reseeded, the next 8 draws of each equal those right after capture",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="streams with different draws",
        code=["assay.train.checkpoint.state"],
    )
    claim.measure(differing())
    for stream in streams:
        claim.control(f"{stream} stream restored one draw off", differing(stream))


# (file, field, edit) re-sealed into a stopped run's checkpoint: each says something its config
# does not, so each must be refused naming the field
EDITS = (
    ("optimizer.json", "param_groups[0].lr", lambda d: d["param_groups"][0].update(lr=0.5)),
    (
        "optimizer.json",
        "param_groups[0].betas",
        lambda d: d["param_groups"][0].update(betas=[0.5, 0.9]),
    ),
    ("optimizer.json", "param_groups[0].eps", lambda d: d["param_groups"][0].update(eps=1e-3)),
    (
        "optimizer.json",
        "param_groups[0].weight_decay",
        lambda d: d["param_groups"][0].update(weight_decay=0.5),
    ),
    (
        "optimizer.json",
        "param_groups[0].maximize",
        lambda d: d["param_groups"][0].update(maximize=True),
    ),
    ("scheduler.json", "base_lrs", lambda d: d.update(base_lrs=[0.5])),
    ("scheduler.json", "_last_lr", lambda d: d.update(_last_lr=[0.5])),
    ("cursor.json", "shuffle", lambda d: d.update(shuffle=False)),
)


def _edits_accepted(root: Path, faults: str) -> int:
    """Resume a copy of a stopped tiny run once per entry of EDITS (the file edited and the
    checkpoint re-sealed, so its sha256 check passes), in a new process with ``faults``
    armed; count the resumes that were not refused in one line naming the field."""
    from assay_testing.defects import child_env
    from assay_testing.forgery import reseal
    from assay_testing.text_run import save_text_run

    root.mkdir(parents=True)
    config = {
        **save_text_run(root, seed=2),
        "optim": {"lr": 1e-2, "warmup_steps": 1, "schedule": "cosine"},
        "steps": 4,
        "seed": 1,
        "output": {"dir": str(root / "half"), "save_every": 2},
    }
    (root / "half.yaml").write_text(yaml.safe_dump(config))
    run(["-m", "assay.cli", "train", str(root / "half.yaml"), "--stop-at", "2", "--no-progress"])
    accepted = 0
    for index, (file, field, edit) in enumerate(EDITS):
        copy = root / f"edit-{index}"
        shutil.copytree(root / "half", copy)
        path = copy / "step-000002" / file
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
        reseal(copy / "step-000002")
        config["output"]["dir"] = str(copy)
        (root / f"edit-{index}.yaml").write_text(yaml.safe_dump(config))
        done = run(
            [
                "-m",
                "assay.cli",
                "train",
                str(root / f"edit-{index}.yaml"),
                "--resume",
                str(copy),
                "--no-progress",
            ],
            check=False,
            env=child_env(faults),
        )
        lines = done.stderr.strip().splitlines()
        refused = done.returncode == 2 and len(lines) == 1 and f"{file}: {field}" in lines[0]
        accepted += not refused
    return accepted


def test_resealed_settings_edits_are_refused(gate, tmp_path):
    claim = gate.claim(
        "resume.settings_from_config",
        f"{len(EDITS)} edits to a stopped run's optimizer.json, scheduler.json and cursor.json "
        "(lr, betas, eps, weight decay, maximize, base and last lr, shuffle), each re-sealed so "
        "the checkpoint's sha256 check passes: `assay train --resume` refuses each in one line "
        "naming the file and field, exit 2 (a resumed run takes its settings from its config)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="edits resumed",
        code=("assay.train.checkpoint.check", "assay.train.loop", "assay.cli.train"),
    )
    claim.measure(_edits_accepted(tmp_path / "clean", ""))
    claim.control(
        "optimizer settings taken from the checkpoint unchecked "
        "(train.checkpoint.check.optimizer_settings_unchecked)",
        _edits_accepted(tmp_path / "defect", "train.checkpoint.check.optimizer_settings_unchecked"),
    )
