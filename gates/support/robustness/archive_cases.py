"""Generated box runs for gate-robustness' import claim (not a gate module): a home ledger of
one to three gates, a box seeded from it (as the GPU kit seeds its receipts folder) that appends
one to three receipts per gate, each carrying zero to three figures, packed into one archive.
The rule, from docs/gpu-kit.md: `assay import-gpu` brings every receipt and figure the box wrote
home byte for byte, beside what home already held. :func:`lost` imports each archive into a
fresh copy of its home and names every file that did not arrive as the box wrote it."""

from __future__ import annotations

import hashlib
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from assay.errors import AssayError
from assay.qualify.ledger.archive import import_archive, pack
from assay.qualify.ledger.chain import chain_head, write_receipt
from assay.qualify.plugin.assemble import figure_name
from assay.qualify.plugin.gate import PNG_MAGIC
from support.faults.tamper_cases import synthetic_receipt

GATES = ("alpha", "beta", "gamma")


@dataclass(frozen=True)
class RoundTrip:
    """One box run: the home it left from, the box's records and the archive it packed."""

    name: str
    home: Path
    box: Path
    archive: Path


def _receipt(gate: str, second: int, figures: list[dict[str, str]]) -> dict:
    receipt = synthetic_receipt(
        f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}Z", 0.0, "0" * 64
    )
    receipt["gate"] = gate
    for claim in receipt["claims"]:
        claim["test"] = f"gates/gate_{gate}.py::test_diff"
    receipt["run"]["tests"] = [{"nodeid": f"gates/gate_{gate}.py::test_diff", "outcome": "passed"}]
    receipt["figures"] = figures
    return receipt


def _figure(records: Path, gate: str, rng: random.Random, index: int) -> dict[str, str]:
    """A PNG-headed file of random bytes under the box's ``figures/<gate>/``, named as the
    plugin names a published figure, and its receipt entry."""
    data = PNG_MAGIC + rng.randbytes(rng.randint(16, 4096))
    sha = hashlib.sha256(data).hexdigest()
    relative = f"figures/{gate}/{figure_name(Path(f'plot{index}.png'), sha)}"
    (records / relative).parent.mkdir(parents=True, exist_ok=True)
    (records / relative).write_bytes(data)
    return {"path": relative, "caption": f"figure {index}", "sha256": sha}


def generate(root: Path, count: int, seed: int) -> list[RoundTrip]:
    """``count`` box runs under ``root``; every third one carries no figure at all."""
    rng = random.Random(seed)
    cases = []
    for number in range(count):
        folder = Path(root) / f"case{number}"
        home, box = folder / "home", folder / "box"
        gates = rng.sample(GATES, rng.randint(1, len(GATES)))
        second = 0
        for gate in gates:
            for _ in range(rng.randint(0, 2)):
                second += 1
                write_receipt(_receipt(gate, second, []), home / "receipts")
        (home / "receipts").mkdir(parents=True, exist_ok=True)
        shutil.copytree(home / "receipts", box / "receipts")
        heads = {gate: chain_head(box / "receipts", gate) for gate in gates}
        drawn = 0  # figure names stay unique within the box
        for gate in gates:
            for _ in range(rng.randint(1, 3)):
                second += 1
                many = 0 if number % 3 == 0 else rng.randint(0, 3)
                figures = [_figure(box / "records", gate, rng, drawn + i) for i in range(many)]
                drawn += many
                write_receipt(_receipt(gate, second, figures), box / "receipts")
        archive = folder / "assay-gpu.tar.gz"
        pack(archive, box / "receipts", box / "records", heads, {"commit": None})
        cases.append(RoundTrip(f"case{number}", home, box, archive))
    return cases


def box_files(case: RoundTrip) -> list[tuple[Path, str]]:
    """What the box wrote that must come home: (the box's file, its place under home)."""
    receipts = sorted((case.box / "receipts").glob("*/*.json"))
    figures = sorted((case.box / "records").glob("figures/*/*.png"))
    return [(p, str(p.relative_to(case.box))) for p in receipts] + [
        (p, str(p.relative_to(case.box / "records"))) for p in figures
    ]


def lost(cases: list[RoundTrip], scratch: Path) -> list[str]:
    """``case: file`` for every receipt or figure the box wrote that is not at home, byte for
    byte, after importing the case's archive into a fresh copy of its home (``case: refused``
    when the import raised)."""
    found = []
    for case in cases:
        home = Path(scratch) / case.name
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(case.home, home)
        try:
            import_archive(case.archive, home / "receipts", home)
        except AssayError as err:
            found.append(f"{case.name}: refused ({err})")
            continue
        for source, relative in box_files(case):
            target = home / relative
            if not target.is_file() or target.read_bytes() != source.read_bytes():
                found.append(f"{case.name}: {relative}")
    return found
