"""The mutmut sample and its interval: a seeded uniform order, the Wilson interval, and the
gate's re-derivation of a summary row (no mutmut run needed)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from assay_testing.mutation import mutmut_score, sample_order, wilson_interval

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_sample_order_is_a_seeded_permutation_independent_of_listing_order():
    names = [f"m{i}" for i in range(50)]
    order = sample_order(names, 7)
    assert sorted(order) == sorted(names)
    assert order == sample_order(list(reversed(names)), 7) == sample_order(set(names), 7)
    assert order != sample_order(names, 8)
    assert order != sorted(names)


def test_every_prefix_of_the_order_is_a_uniform_sample():
    # Over many seeds each name lands in the first k as often as any other: k/N of the time.
    names, k, seeds = [f"m{i}" for i in range(10)], 3, 3000
    hits = dict.fromkeys(names, 0)
    for seed in range(seeds):
        for name in sample_order(names, seed)[:k]:
            hits[name] += 1
    expected = seeds * k / len(names)
    sigma = (seeds * (k / len(names)) * (1 - k / len(names))) ** 0.5
    assert all(abs(h - expected) < 5 * sigma for h in hits.values()), hits


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [(8, 10, 0.4902, 0.9433), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (20, 40, 0.352, 0.648)],
)
def test_wilson_interval_known_values(successes, n, low, high):
    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=2e-4)
    assert got[0] <= successes / n <= got[1]


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)
    # Narrower with more data at the same proportion.
    assert wilson_interval(30, 40)[1] - wilson_interval(30, 40)[0] < (
        wilson_interval(15, 20)[1] - wilson_interval(15, 20)[0]
    )


def test_wilson_interval_covers_the_true_score_about_95_percent_of_the_time():
    rng, p, n, runs = random.Random(1), 0.7, 40, 2000
    covered = 0
    for _ in range(runs):
        k = sum(rng.random() < p for _ in range(n))
        low, high = wilson_interval(k, n)
        covered += low <= p <= high
    assert 0.92 <= covered / runs <= 0.98


def _row(seed: int = 3) -> dict:
    population = [f"assay.storage.nf4.x_f__mutmut_{i}" for i in range(1, 61)]
    sampled = dict.fromkeys(sample_order(population, seed)[:25], 1)
    sampled[next(iter(sampled))] = 0
    counts = mutmut_score(sampled)
    low, high = wilson_interval(counts["killed"] + counts["timeout"], counts["tested"])
    return {
        "modules": ["src/assay/storage/nf4.py"],
        "population": 60,
        "population_names": population,
        "seed": seed,
        "sampled": sampled,
        "wilson95": [low, high],
        **counts,
    }


def test_gate_rederives_a_row_and_rejects_edited_ones():
    gate = _load("gate_mutation_under_test", ROOT / "gates" / "gate_mutation.py")
    assert gate._check_row("storage", _row())["score"] == 0.96
    picked = _row()  # a hand-picked sample: one name swapped for one outside the seeded prefix
    outside = sample_order(picked["population_names"], picked["seed"])[-1]
    picked["sampled"][outside] = picked["sampled"].pop(next(iter(picked["sampled"])))
    edited = _row()  # a hand-edited score
    edited["score"] = 0.99
    foreign = _row()  # mutants of a module the row does not name
    foreign["modules"] = ["src/assay/storage/linear.py"]
    for bad in (picked, edited, foreign):
        with pytest.raises(AssertionError):
            gate._check_row("storage", bad)


def test_harness_config_copies_test_data_and_keeps_slow_tests_out(tmp_path):
    harness = _load("mutmut_run_under_test", ROOT / "harness" / "mutmut_run.py")
    text = harness._config(("src/assay/storage/nf4.py",), ("tests/storage",))
    assert 'also_copy = ["examples"' in text
    assert '"-m", "not slow"' in text
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    hashes = harness.sources_sha256(("pkg", "b.py"), root=tmp_path)
    assert sorted(hashes) == ["b.py", "pkg/a.py"]
