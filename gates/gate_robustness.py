"""gate-robustness: every malformed input ends in one clean line and exit 2, the header parsers
and loaders survive fuzzing within their bounds, receipts render injected markup inert, and
nothing unpickles. (Faults during writes and tampered ledgers: gate-faults.)

The corpus is generated in the session (tests/corpus/generate.py) from a fresh tiny model.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import pytest

from assay.qualify import Threshold, Tolerance
from assay.qualify.plugin.claim import MeasuredControl

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "corpus"), str(TESTS / "robustness")]

import base_identity  # noqa: E402
import config_cases  # noqa: E402
import fuzz  # noqa: E402
import fuzz_loaders  # noqa: E402
import same_function  # noqa: E402
from corpus_harness import judge_message, run_case, run_case_subprocess  # noqa: E402
from corpus_inputs import INJECTION, injection_record, live_markup  # noqa: E402
from corpus_robust import CLASSES as ISSUE16  # noqa: E402
from corpus_round3 import CLASSES as ISSUE30  # noqa: E402
from corpus_round4 import CLASSES as ISSUE41  # noqa: E402
from corpus_round5 import CLASSES as ISSUE52  # noqa: E402
from corpus_run import run_all  # noqa: E402
from generate import build_corpus  # noqa: E402
from unsafe_scan import scan_tree, unsafe_calls  # noqa: E402

from assay.model.gguf_header import _Cursor, read_header  # noqa: E402
from assay.model.safetensors import check_safetensors_header  # noqa: E402
from support.moved_claims import retire_moved_claims  # noqa: E402

# the claim a reader looks at first (the index and every record lead with it)
HEADLINE = "corpus.clean_errors"

READERS = (
    "assay.model.gguf_header",
    "assay.model.gguf",
    "assay.model.safetensors",
    "assay.model.loader",
    "assay.train.data.rows",
    "assay.settings.loader",
    "assay.settings.yaml_reader",
    "assay.settings",
    "assay.settings.schema",
    "assay.train.checkpoint.directory",
    "assay.qualify.ledger.receipt",
    "assay.qualify.publishing.render",
    "assay.cli",
    "assay.cli.train",
)
END_TO_END = ("gguf.truncated_tensor_data", "jsonl.invalid_utf8", "yaml.full_with_nf4")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def corpus_runs(corpus):
    """(outcomes, seconds per case) of every corpus case, run once in a few processes."""
    return run_all(corpus)


def test_bad_inputs_fail_cleanly(gate, corpus, corpus_runs, monkeypatch):
    outcomes = [o for o in corpus_runs[0] if not o.case.accept]  # legal input: corpus.legal
    corpus = [c for c in corpus if not c.accept]
    outcomes += [run_case_subprocess(c) for c in corpus if c.name in END_TO_END]
    crashes = sum(o.crashed or o.hung for o in outcomes)
    unclean = [o for o in outcomes if not o.clean]
    kinds = sorted({c.kind for c in corpus})
    claim = gate.claim(
        "corpus.clean_errors",
        f"{len(corpus)} malformed inputs across {', '.join(kinds)} (and {len(END_TO_END)} of "
        "them again as real processes): each ends in exit 2 with one stderr line naming the "
        "file and the field, row or offset, no traceback, nothing on stdout, no file changed",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases not clean",
        code=[*READERS, "corpus_harness", "corpus_run", "generate"],
    )
    claim.measure(len(unclean))
    gate.note(
        f"corpus: {len(outcomes)} cases tried, {len(outcomes) - len(unclean)} clean errors, "
        f"{crashes} crashes or hangs; not clean: {[o.case.name for o in unclean] or 'none'}"
    )
    truncated = [c for c in corpus if c.kind == "gguf" and "truncated" in c.name]
    monkeypatch.setattr(_Cursor, "take", fuzz.unchecked_take)
    broken = [run_case(case) for case in truncated]
    monkeypatch.undo()
    claim.control(
        f"the {len(truncated)} truncated-GGUF cases against a parser with its bounds check removed",
        sum(not o.clean for o in broken),
    )
    nameless = [
        judge_message(o.case, o.code, o.stderr.replace(str(o.case.file), "the file"))
        for o in outcomes
        if o.clean
    ]
    claim.control(
        "the same error lines with the file name removed, judged by the 'names the file' check",
        sum(bool(p) for p in nameless),
    )


def test_markdown_injection_renders_inert(gate, tmp_path):
    _, record = injection_record(tmp_path)
    claim = gate.claim(
        "receipt.injection_inert",
        "a receipt whose statement, control name and note carry a forged table cell, heading, "
        "<script> tag, javascript: link and image renders with none of them live",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="live markup kinds",
        code=["assay.qualify.publishing.render", "assay.qualify.ledger.receipt", "corpus_inputs"],
    )
    claim.measure(len(live_markup(record)) + int("Forged heading" not in record))
    claim.control("the same string pasted into a record unescaped", len(live_markup(INJECTION)))


def test_header_parsers_survive_fuzzing(gate, tmp_path, monkeypatch):
    gate.seed(11, 12)
    n = 400
    gguf = fuzz.fuzz(read_header, fuzz.valid_gguf(), tmp_path / "f.gguf", n, 11)
    st = fuzz.fuzz(check_safetensors_header, fuzz.valid_safetensors(), tmp_path / "f.st", n, 12)
    claim = gate.claim(
        "fuzz.header_parsers",
        f"{n} mutants each of a GGUF and a safetensors header (byte flips, huge integers, "
        f"truncations, splices): every one parses or raises ModelFileError within "
        f"{fuzz.PER_EXAMPLE_S:g} s",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="other exceptions or hangs",
        code=["assay.model.gguf_header", "assay.model.safetensors", "fuzz"],
    )
    claim.measure(fuzz.unexpected(gguf) + fuzz.unexpected(st))
    gate.note(f"fuzz outcomes: gguf {gguf}; safetensors {st}")
    monkeypatch.setattr(_Cursor, "take", fuzz.unchecked_take)
    control = fuzz.fuzz(read_header, fuzz.valid_gguf(), tmp_path / "c.gguf", n, 11)
    claim.control(
        "the GGUF mutants against the parser with its bounds check removed",
        fuzz.unexpected(control),
    )
    gate.note(f"fuzz control outcomes: {control}")


def test_config_fields_are_read_or_refused(gate, monkeypatch):
    """Issue 51: a config.json field that changes the math is read or refused by name, and no
    number past its range sizes anything (docs/models.md)."""
    from assay.model import hf_fields

    gate.seed(51)
    n = 600
    generated = config_cases.cases(51, n)
    outside = sum(not case.should_load for case in generated)
    claim = gate.claim(
        "config.fields_read_or_refused",
        f"{n} generated config.json files ({outside} with a value the field table refuses or a "
        "number past its range, the rest inside): each loads exactly when the table says it "
        "may (a GELU, a soft-cap, attention dropout, 1e30 layers: refused by key and value)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases misjudged",
        code=["assay.model.config", "assay.model.hf_fields", "config_cases"],
    )
    wrong = config_cases.misjudged(generated)
    claim.measure(len(wrong))
    gate.note(f"config cases misjudged: {wrong[:5]}")
    table = tuple(rule for rule in hf_fields.RULES if rule.key != "hidden_act")
    monkeypatch.setattr(hf_fields, "RULES", table)
    claim.control(
        "the same cases with the hidden_act row taken out of the table (a GELU model loads)",
        len(config_cases.misjudged(generated)),
    )


def test_config_is_read_as_transformers_reads_it(gate, monkeypatch):
    """Issue 51's second attack: files that combine interdependent keys (a null head_dim, 0 for
    a boolean, sliding keys that contradict, rope_scaling beside rope_parameters and a theta)
    are read as transformers 5 reads them, or refused (docs/models.md)."""
    import assay.model.config
    import assay.model.hf_fields
    from assay_testing import transformers_configs

    gate.seed(151)
    n = 400
    files = transformers_configs.generated(151, n)
    claim = gate.claim(
        "config.read_as_transformers",
        f"{n} generated config.json files over the {len(transformers_configs.CLASSES)} "
        "families, each combining up to five of head_dim, attention_bias, mlp_bias, "
        "tie_word_embeddings, the sliding-window and layer-kind keys, rope_parameters (flat or "
        "per layer kind), rope_scaling, rope_theta, rms_norm_eps, pad_token_id, vocab_size, "
        "resid_pdrop and Gemma 3's keys: each file transformers 5 refuses or cannot run a "
        "forward pass on is refused in one line naming the file, and each file assay reads, "
        "transformers reads with the same head size, rope per layer kind, window per layer, "
        "attention scale, tied head and norm epsilon",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="files misjudged",
        code=[
            "assay.model.config",
            "assay.model.families",
            "assay.model.hf_fields",
            "assay_testing.transformers_configs",
        ],
    )
    wrong = transformers_configs.misjudged(files)
    claim.measure(len(wrong))
    gate.note(f"transformers config cases misjudged: {wrong[:3]}")
    refused = sum(isinstance(transformers_configs.as_assay(hf), str) for hf in files)
    gate.note(f"transformers config cases: {refused} of {n} refused by assay")
    from assay.model.families import FAMILIES, RMS_NORM_EPS

    plain = {
        name: dataclasses.replace(
            entry, head_dim=None, rms_norm_eps=RMS_NORM_EPS, tied=False, pad_token=None
        )
        for name, entry in FAMILIES.items()
    }
    monkeypatch.setattr(assay.model.config, "FAMILIES", plain)
    claim.control(
        "the same files read with every family's own defaults dropped (Llama's head size, norm "
        "epsilon, untied head and no pad where a key is absent)",
        len(transformers_configs.misjudged(files)),
    )


def test_a_base_is_its_weights_and_its_numerics(gate, tmp_path, monkeypatch):
    """Issue 51's second attack: an adapter trained on Granite loaded onto the same weights
    with the multipliers at 1 (or read as Llama), and a run resumed after its base's
    config.json changed a value of the forward pass, went on with no word. Both now name the
    base's numerics beside its weights (docs/adapters.md, docs/training.md)."""
    import assay.adapters.base_identity
    import assay.train.loop
    from assay_testing.tiny import save_tiny

    granite = save_tiny("granite", tmp_path / "tiny", seed=0, gguf=False)["hf"]
    cases = base_identity.ADAPTER_CASES + 2 * len(base_identity.RESUME_CHANGES)
    claim = gate.claim(
        "identity.base_refused",
        f"{cases} cases: a PEFT-format and a TinyLoRA adapter trained on a tiny Granite, each "
        "loaded onto a copy of it whose config.json changes embedding_multiplier (to 1, or by "
        "a millionth), logits_scaling, rms_norm_eps, the rope theta or the family (the same "
        "weights); a run stopped after one step, resumed and generated from after its base's "
        "rms_norm_eps or rope theta changed: each refused in one line naming the base; four "
        "malformed recorded numerics (strings, a 400-digit integer): one line, no exception; "
        "a context length no forward pass reads changes nothing, and a Mistral adapter loads "
        "onto the same model's GGUF",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases misjudged",
        code=[
            "assay.adapters.base_identity",
            "assay.model.config",
            "assay.train.checkpoint.directory",
            "base_identity",
        ],
    )

    def misjudged(where: Path) -> list[str]:
        return [
            *base_identity.adapter_outcomes(granite, where / "adapters"),
            *base_identity.malformed_outcomes(granite),
            *base_identity.gguf_outcomes(where / "gguf"),
            *base_identity.resume_outcomes(where / "resume"),
        ]

    wrong = misjudged(tmp_path / "product")
    claim.measure(len(wrong))
    gate.note(f"base identity cases misjudged: {wrong}")
    monkeypatch.setattr(assay.adapters.base_identity, "first_difference", lambda *_: None)
    monkeypatch.setattr(
        assay.train.loop,
        "model_fingerprints",
        lambda base: {"model": base.fingerprint.canonical_sha256},
    )
    claim.control(
        "the same cases with the numerics compared nowhere (the weights alone, as before the "
        "attack)",
        len(misjudged(tmp_path / "control")),
    )


def _window_unbound(folder: Path) -> Path:
    """``folder`` with its sliding window, if it has one, widened to its context: a window that
    binds is refused apart, so the family alone decides."""
    from assay_testing.tiny import edit_config

    config = json.loads((folder / "config.json").read_text())
    if config.get("sliding_window") is not None:
        edit_config(folder, sliding_window=config["max_position_embeddings"])
    return folder


def test_a_file_is_read_and_written_as_transformers_computes_it(gate, tmp_path):
    """Issue 51's second attack: a tied config over a folder that stores its own head loaded
    with the head dropped (logits 147% off), and a Mistral whose window binds was exported as a
    GGUF that attends over everything (logits 4.14 off). Each family whose GGUF assay does not
    read back (OLMo 2, Phi-3, Gemma 3: the tiny registry's) joins them (docs/models.md)."""
    from assay_testing import defects
    from assay_testing.tiny import FAMILIES, save_tiny, writes_gguf

    gate.seed(0, 3)
    tiny = tmp_path / "tiny"
    mistral = save_tiny("mistral", tiny, seed=0, gguf=False)["hf"]
    unwritten = {
        family: _window_unbound(save_tiny(family, tiny, seed=3, gguf=False)["hf"])
        for family in FAMILIES
        if not writes_gguf(family)
    }
    claim = gate.claim(
        "files.same_function",
        f"{4 + len(unwritten)} cases: a tiny Mistral folder with tie_word_embeddings set true "
        "over its own head is refused in one line naming its weights file, and over a head "
        "equal to the embedding loads with transformers' logits (within 1e-4); a GGUF export "
        f"of it with a sliding window of 4 and of a tiny {', '.join(unwritten)} (each family "
        "whose GGUF assay does not read) are refused in one line naming the target, with "
        "nothing written, and with its own window (no shorter than its context) is written and "
        "read back with its logits",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases misjudged",
        code=[
            "assay.model.safetensors",
            "assay.model.gguf_export",
            "assay_testing.defects.model",
            "same_function",
        ],
    )

    def misjudged(where: Path) -> list[str]:
        return [
            *same_function.tied_head_outcomes(mistral, where / "tied"),
            *same_function.gguf_outcomes(mistral, unwritten, where / "gguf"),
        ]

    wrong = misjudged(tmp_path / "product")
    claim.measure(len(wrong))
    gate.note(f"same-function cases misjudged: {wrong}")
    found = []
    for defect in (
        "model.safetensors.tied_head_dropped",
        "model.gguf_export.window_dropped",
        "model.gguf_export.any_family",
    ):
        with defects.inject(defect):
            found += misjudged(tmp_path / defect)
    claim.control(
        "the same cases with each of the three checks removed in turn (the tied head, the "
        "window, the family)",
        len(found),
    )
    gate.note(f"same-function cases misjudged with the checks removed: {found}")


def _hub_outcomes(cache: Path, local: Path) -> list[str]:
    """What a Hub-name lookup got wrong over five cases against ``cache`` (``org/cached`` at
    main and at v1, v2 not cached, ``org/absent``) and a local folder named like a Hub name."""
    import os

    from assay.errors import ConfigError
    from assay.settings.hub import cached_snapshot, hub_name

    folder = cache / "models--org--cached"
    wrong = []
    for reference, expected in (
        ("org/cached", folder / "snapshots" / ("a" * 40)),
        ("org/cached@v1", folder / "snapshots" / ("b" * 40)),
        ("org/cached@v2", "hf download org/cached --revision v2"),
        ("org/absent", "hf download org/absent"),
    ):
        try:
            got: object = cached_snapshot(reference, "run.yaml: model")
        except ConfigError as error:
            got = str(error) if "\n" not in str(error) else "several lines"
        if (got != expected) if isinstance(expected, Path) else not str(got).endswith(expected):
            wrong.append(reference)
    here = Path.cwd()
    os.chdir(local)
    try:
        if hub_name("org/cached") is not None:
            wrong.append("local folder org/cached")
    finally:
        os.chdir(here)
    return wrong


def test_hub_names_resolve_from_the_local_cache_alone(gate, tmp_path, monkeypatch):
    """Issue 51: ``model: org/name[@revision]`` is found in the local Hugging Face cache,
    never downloaded; an uncached one is one line naming the fetch command."""
    import socket

    import huggingface_hub.constants

    from assay.settings import hub

    cache = tmp_path / "hf-cache"
    folder = cache / "models--org--cached"
    for revision, commit in (("main", "a" * 40), ("v1", "b" * 40)):
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / revision).write_text(commit)
        (folder / "snapshots" / commit).mkdir(parents=True)
        (folder / "snapshots" / commit / "config.json").write_text("{}")
    (tmp_path / "cwd" / "org" / "cached").mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def no_network(*args, **kwargs):
        raise OSError("a Hub lookup tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    claim = gate.claim(
        "hub.cache_only",
        "Hub names resolve from the local Hugging Face cache with the network cut off: a "
        "cached name and revision give their snapshot, an uncached revision or name is one "
        "line naming `hf download`, and a local folder named like a Hub name wins (5 cases)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases wrong",
        code=["assay.settings.hub", "assay.settings.loader"],
    )
    wrong = _hub_outcomes(cache, tmp_path / "cwd")
    claim.measure(len(wrong))
    gate.note(f"hub cases wrong: {wrong}")
    named = hub.hub_name
    monkeypatch.setattr(
        hub, "hub_name", lambda ref, root=None: (p := named(ref, root)) and (p[0], None)
    )
    claim.control(
        "the same cases with the @revision dropped from the name",
        len(_hub_outcomes(cache, tmp_path / "cwd")),
    )


def test_nothing_unpickles(gate):
    src = Path(__file__).resolve().parents[1] / "src"
    claim = gate.claim(
        "load.no_pickle",
        "no pickle load/loads, no torch.load without weights_only=True and no numpy "
        "allow_pickle anywhere under src/",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="unsafe calls",
        code=[str(TESTS / "robustness" / "unsafe_scan.py")],
    )
    found = scan_tree(src)
    claim.measure(len(found))
    claim.control(
        "the scanner on `torch.load(f)` and `pickle.loads(b)`",
        len(unsafe_calls("torch.load(f)\npickle.loads(b)\n")),
    )


ISSUE16_READERS = (
    "assay.bounded",
    "assay.train.preflight",
    "assay.train.checkpoint.check",
    "assay.train.run.folder",
    "assay.train.run.lock",
    "assay.train.checkpoint.layout",
    "assay.adapters.manifest",
    "assay.adapters.export",
    "assay.adapters.peft_io",
    "assay.cli.checkpoint_arg",
    "assay.train.data.rows",
)


def _control_run(cases, fault: str, hang_s: float):
    """The cases again with ``fault`` armed (the guard removed), cut off after ``hang_s``."""
    import corpus_harness

    from assay_testing import defects

    previous = corpus_harness.HANG_SECONDS
    corpus_harness.HANG_SECONDS = hang_s
    try:
        with defects.inject(fault):
            return [run_case(case) for case in cases]
    finally:
        corpus_harness.HANG_SECONDS = previous


ISSUE30_READERS = (
    "assay.bounded",
    "assay.settings.yaml_reader",
    "assay.train.preflight",
    "assay.train.run.folder",
    "assay.cli.train",
    "assay.cli.estimate",
    "assay.distributed.context",
    "assay.cli.generate",
    "assay.qualify.cli_commands",
    "assay.qualify.ledger.receipt",
)
ISSUE41_READERS = (
    "assay.bounded",
    "assay.cli.status",
    "assay.cli.train",
    "assay.train.run.folder",
    "assay.train.run.lock",
    "assay.train.run.state",
    "assay.train.report",
    "assay.settings.yaml_scalars",
    "assay.settings.yaml_reader",
    "assay.train.checkpoint.directory",
    "assay.train.data.rows",
    "assay.qualify.ledger.archive",
    "assay.qualify.ledger.tar_stream",
    "assay.qualify.ledger.import_commit",
    "assay.qualify.ledger.chain",
    "assay.qualify.ledger.dsse",
    "assay.qualify.publishing.attest",
    "assay.qualify.cli_commands",
)
ISSUE52_READERS = (
    "assay.cli.train",
    "assay.cli.estimate",
    "assay.train.loop",
    "assay.train.checkpoint.directory",
    "assay.settings.loader",
    "assay.settings.derived",
    "assay.qualify.core.identifier",
    "assay.qualify.ledger.receipt",
    "assay.qualify.ledger.chain",
    "assay.qualify.ledger.corrections",
    "assay.qualify.judging.loading",
)
# class -> its product controls: (fault point that removes a guard, case-name filter) each
PRODUCT_CONTROLS = {
    "bounds": [("bounded.unbounded_aliases", "alias_bomb")],
    "surrogate": [("train.data.rows.allow_surrogates", "text_value")],
    "numbers": [("bounded.long_integers_read", "jsonl")],
    "legal": [("settings.yaml_reader.merge_keys_refused", "merge_keys")],
    "line_separators": [("bounded.split_lines_at_every_break", "ledger_comment")],
    "export": [("cli.checkpoint_arg.parent_taken", "_not_a_run")],
    "replace": [
        ("train.run.folder.any_folder_is_a_run", "overwrite_"),
        ("train.run.folder.edits_unchecked", "_edited_"),
        ("adapters.export.gguf_seal_unchecked", "gguf_edited"),
    ],
    "shortcuts": [("cli.train.finished_before_checks", "shortcuts.")],
    "derived": [("settings.derived.unchecked", "derived.")],
    "claim_ids": [("qualify.core.identifier.lookalikes_accepted", "claim_ids.")],
    "ledger_files": [("qualify.ledger.chain.refused_ledger_listed", "ledger_dev_zero")],
}
# class -> (what the claim's statement says it covers, the code it names)
CLASSES = {
    **{
        k: (f"issue 16 item {v}", [*ISSUE16_READERS, "corpus_robust", "corpus_outputs"])
        for k, v in ISSUE16.items()
    },
    **{k: (f"issue 30, {v}", [*ISSUE30_READERS, "corpus_round3"]) for k, v in ISSUE30.items()},
    **{k: (f"issue 41, {v}", [*ISSUE41_READERS, "corpus_round4"]) for k, v in ISSUE41.items()},
    **{k: (f"issue 52, {v}", [*ISSUE52_READERS, "corpus_round5"]) for k, v in ISSUE52.items()},
}


def test_corpus_classes_refused_per_class(gate, corpus, corpus_runs):
    outcomes = corpus_runs[0]
    for kind, (label, code) in CLASSES.items():
        mine = [o for o in outcomes if o.case.kind == kind]
        legal = all(o.case.accept for o in mine) and bool(mine)
        expected = (
            "runs: exit 0 and no error line"
            if legal
            else "exits 2 with one stderr line naming the file and the field, row or offset, no "
            "traceback, nothing on stdout, no file changed"
        )
        claim = gate.claim(
            f"corpus.{kind}",
            f"{label}: each of {len(mine)} cases {expected} (a class with no cases counts as "
            "one failure)",
            kind="correctness",
            threshold=Threshold("==", 0),
            unit="cases not clean",
            code=[*code, "corpus_run"],
        )
        claim.measure(sum(not o.clean for o in mine) + (0 if mine else 1))
        if not legal:
            stripped = [
                judge_message(
                    o.case,
                    o.code,
                    o.stderr.replace(str(o.case.file), "F").replace(o.case.where, "W"),
                )
                for o in mine
            ]
            claim.control(
                "the same error lines with the file and the field or offset removed",
                sum(bool(p) for p in stripped),
            )
        for fault, pick in PRODUCT_CONTROLS.get(kind, []):
            broken = _control_run([o.case for o in mine if pick in o.case.name], fault, 4.0)
            claim.control(
                f"the {pick} cases with fault {fault} armed (guard removed)",
                sum(not o.clean for o in broken),
            )
        bad = [f"{o.case.name}: {o.problems}" for o in mine if not o.clean]
        gate.note(f"{kind}: {len(mine)} cases, not clean: {bad or 'none'}")
    kinds = sorted({c.kind for c in corpus})
    sizes = ", ".join(f"{k} {sum(c.kind == k for c in corpus)}" for k in kinds)
    gate.note(f"corpus total: {len(corpus)} cases; by class: {sizes}")


def test_loaders_fuzzed_within_bounds(gate, tmp_path, corpus_runs):
    gate.seed(31, 32, 33)
    n = 150
    config = fuzz_loaders.fuzz_config_loader(tmp_path / "config", n, 31)
    rows = fuzz_loaders.fuzz_jsonl_reader(tmp_path / "rows", n, 32)
    claim = gate.claim(
        "fuzz.loaders",
        f"{n} Hypothesis train configs of the valid shape with hostile values (NaN, infinities, "
        "integers past 2**63, lone surrogates, deep nesting, alias chains) and {n} JSONL files "
        "of TRL rows with hostile values: each loads, or raises the loader's one-line error; "
        "a loaded row holds only encodable text and finite numbers",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="other exceptions",
        code=[
            "assay.bounded",
            "assay.settings.yaml_reader",
            "assay.train.data.rows",
            "fuzz_loaders",
        ],
    )
    claim.measure(config.unexpected + rows.unexpected)
    gate.note(f"fuzz config: {config.examples} examples, samples {config.samples or 'none'}")
    gate.note(f"fuzz jsonl: {rows.examples} examples, samples {rows.samples or 'none'}")
    from assay_testing import defects

    with defects.inject("train.data.rows.allow_surrogates"):
        control = fuzz_loaders.fuzz_jsonl_reader(tmp_path / "rows-control", n, 32)
    claim.control("the JSONL examples with the lone-surrogate check removed", control.unexpected)

    bounds = {o.case.name: s for o, s in zip(*corpus_runs, strict=True) if o.case.kind == "bounds"}
    worst_case = max(bounds, key=bounds.get)
    worst = max(config.worst_s, rows.worst_s, bounds[worst_case])
    timing = gate.claim(
        "load.worst_case_s",
        f"the slowest of those loads and of the hostile-size corpus cases (alias bombs, a "
        f"config past 1 MiB, nesting past the depth cap, a JSONL line past its cap) answers "
        f"within {fuzz_loaders.LOAD_BOUND_S:g} s",
        kind="performance",
        # wall time on a shared machine: regression means drifting a tenth of the bound, not
        # any slowdown of a 0.2 s measurement
        threshold=Threshold(
            "<=", fuzz_loaders.LOAD_BOUND_S, tolerance=Tolerance.threshold_scaled(0.1)
        ),
        unit="s",
        code=[
            "assay.bounded",
            "assay.settings.yaml_reader",
            "assay.train.data.rows",
            "fuzz_loaders",
        ],
    )
    timing.measure(worst)
    gate.note(
        f"worst load: config fuzz {config.worst_s:.3f} s, jsonl fuzz {rows.worst_s:.3f} s, "
        f"corpus {worst_case} {bounds[worst_case]:.3f} s"
    )
    bomb = next(c for c in corpus_runs[0] if c.case.name == "bounds.alias_bomb_targets").case
    started = time.perf_counter()
    _control_run([bomb], "bounded.unbounded_aliases", fuzz_loaders.LOAD_BOUND_S + 1)
    timing.control(
        "the alias-bomb config with alias counting removed (cut off 1 s past the bound)",
        MeasuredControl(time.perf_counter() - started, "s"),  # timed here, not typed in
    )


# Claims that gate-faults has held since the split (stop 34), retired here while gate-faults'
# newest receipt passes each one.
MOVED_TO_FAULTS = (
    "crash.last_good_state",
    "ledger.tamper_undetected",
    "writes.kill_mid_write",
    "writes.short_writes",
    "writes.torn_refused",
    "writes.metrics_torn_line",
    "export.complete_or_absent",
)


def test_claims_moved_to_gate_faults_live_there(gate, pytestconfig):
    gate.note(retire_moved_claims(gate, "faults", MOVED_TO_FAULTS, pytestconfig))


def test_compare_judges_generated_ledgers_as_its_rule_says(gate, tmp_path):
    """`assay compare` on generated ledger pairs: one claim of NEW's later run is unchanged,
    improved, flipped to fail or gone; the rule (docs/ci.md) gives the exit code and the
    change it must name."""
    from assay_testing.defects import inject
    from support.robustness.compare_cases import KINDS, compare_json, generate, misjudged

    gate.seed(31)
    cases = generate(tmp_path / "ledgers", 40, seed=31)
    claim = gate.claim(
        "compare.generated_ledgers",
        f"{len(cases)} generated pairs of ledgers ({', '.join(sorted(KINDS))} in turn; 2 to 6 "
        "claims of random operators, bounds and values; a vanished pair's NEW holds another gate "
        "only): `assay compare OLD NEW --json` exits 1 exactly when a claim flipped to fail or "
        "went missing, alone or with its whole gate, and 0 for float noise, a regression still "
        "passing (a warning) and a timing measured at another load (not comparable), naming "
        "the change",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="misjudged pairs",
        code=("assay.qualify.publishing.compare.changes", "assay.qualify.publishing.compare.sides"),
    )
    wrong = misjudged(cases, compare_json)
    claim.measure(len(wrong))
    if wrong:
        gate.note("misjudged: " + "; ".join(wrong[:6]))
    for defect, what in (
        ("flip_unseen", "a flip to fail never reported"),
        ("vanished_gate_unseen", "a deleted gate's claims not counted"),
        ("noise_counted", "no float-noise floor"),
        ("passing_regression_fails", "a regression still passing fails the comparison"),
        ("timings_always_compared", "timings compared whatever the load"),
    ):
        name = f"qualify.publishing.compare.changes.{defect}"
        with inject(name):
            claim.control(f"{what} ({name})", len(misjudged(cases, compare_json)))


def test_box_runs_come_home_byte_for_byte(gate, tmp_path):
    """Issue 55's type check found `assay import-gpu` writing a receipt's last figure in the
    receipt's place. Generated box runs (one to three gates, one to three receipts each, zero
    to three figures per receipt, on homes that already hold receipts or none): after the
    import, every receipt and figure the box wrote is at home byte for byte."""
    from assay_testing.defects import inject
    from support.robustness.archive_cases import box_files, generate, lost

    gate.seed(37)
    cases = generate(tmp_path / "boxes", 12, seed=37)
    written = [relative for case in cases for _, relative in box_files(case)]
    files, figures = len(written), sum(r.startswith("figures/") for r in written)
    claim = gate.claim(
        "import.byte_for_byte",
        f"{len(cases)} generated box runs ({files - figures} receipts and {figures} figures; a "
        "third of the runs carry no figure): `assay import-gpu`'s import brings every receipt "
        "and figure the box wrote home byte for byte",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="files lost or altered",
        code=("assay.qualify.ledger.archive", "assay.qualify.ledger.import_commit"),
    )
    missing = lost(cases, tmp_path / "home")
    claim.measure(len(missing))
    if missing:
        gate.note("lost or altered: " + "; ".join(missing[:6]))
    name = "qualify.ledger.archive.figure_in_receipts_place"
    with inject(name):
        claim.control(
            f"a receipt's last figure written in its place, the bug fixed ({name})",
            len(lost(cases, tmp_path / "control")),
        )


def test_every_run_has_a_mark_in_every_view(gate, tmp_path):
    """Issue 52, rule 4: a run with no finite value (NaN, never measured, the claim absent)
    used to drop out of the claim's figure and the index sparkline, which then ended on the
    passing run before it; receipts not yet committed passed verification unremarked."""
    from assay_testing.defects import inject
    from support.robustness.history_cases import misdrawn, uncommitted_unnamed

    gate.seed(41)
    count = 40
    code = ("assay.qualify.publishing.history", "support.robustness.history_cases")
    marks = gate.claim(
        "history.every_run_marked",
        f"{count} generated ledgers of 1 to 12 runs (passing, failing, NaN, or without the "
        "claim): from the first finite value on, the claim's figure has one mark per run (a "
        "red cross where there is no finite value) and its sparkline one character per run "
        "(x where the run does not pass)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="ledgers drawn against the rule",
        code=code,
    )
    wrong = misdrawn(tmp_path / "drawn", count, seed=41)
    marks.measure(len(wrong))
    if wrong:
        gate.note("misdrawn: " + "; ".join(wrong[:4]))
    with inject("qualify.publishing.history.valueless_runs_dropped"):
        marks.control(
            "runs without a finite value dropped from the views "
            "(qualify.publishing.history.valueless_runs_dropped)",
            len(misdrawn(tmp_path / "control", count, seed=41)),
        )
    fresh = (1, 2, 5)
    noted = gate.claim(
        "history.uncommitted_named",
        f"a committed ledger with {', '.join(map(str, fresh))} later receipts no commit holds: "
        "the history check says, in one note each time, that the gate's history is not checked "
        "for them, with their number and the newest file",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="ledgers without the note",
        code=("assay.qualify.ledger.history", "support.robustness.history_cases"),
    )
    missed = [uncommitted_unnamed(tmp_path / f"git-{n}", n) for n in fresh]
    noted.measure(sum(bool(m) for m in missed))
    with inject("qualify.ledger.history.uncommitted_unnoted"):
        broken = [uncommitted_unnamed(tmp_path / f"control-git-{n}", n) for n in fresh]
    noted.control(
        "the note removed (qualify.ledger.history.uncommitted_unnoted)",
        sum(bool(m) for m in broken),
    )


DESCRIBED = {
    "qualify.plugin.gate.reach_from_process": "declared modules checked against the process's "
    "imports",
    "qualify.plugin.child_imports.reports_for_every_gate": "every child's report counted for "
    "every gate",
}


def test_a_gates_verdict_does_not_depend_on_what_else_ran(gate, tmp_path):
    """Issue 52, rule 5: `nox -s gate-exports` alone errored at teardown (a declared module
    "never imported by its test") while the same gate passed among all gates, because the check
    read the process's imports. Real pytest runs of a throwaway project whose gates would leak
    into each other under such a check: each alone, all in order, reversed and shuffled, on 1
    and 2 workers. The same runs' receipts show whether a claim's import_files depend on which
    test imported a package first (found by the issue-52 adversary)."""
    from support.robustness.verdict_cases import (
        CONTROLS,
        IMPORT_CONTROLS,
        IMPORTERS,
        PACKAGE_INITS,
        differing,
        fault_env,
        import_lists,
        imports_differing,
        outcomes,
        runs,
        unexpected,
    )

    gate.seed(7)
    planned = runs(seeds=(7,))
    claim = gate.claim(
        "verdicts.order_independent",
        f"{len(planned)} real pytest runs of four gates (each alone; all in order, reversed and "
        "shuffled, on 1 and 2 workers): every test's outcome is the same in every run and is "
        "what its declarations call for (a module its gate cannot reach errors the test, a "
        "child's report counts only for the test that started it)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="tests with a differing or wrong outcome",
        code=(
            "assay.qualify.plugin.gate",
            "assay.qualify.plugin.reachable",
            "assay.qualify.plugin.child_imports",
            "support.robustness.verdict_cases",
        ),
    )
    table = outcomes(tmp_path / "runs", planned)
    wrong = differing(table) + unexpected(table)
    claim.measure(len({line.split("::", 1)[0] for line in wrong}))
    if wrong:
        gate.note("verdicts: " + "; ".join(wrong[:4]))
    for fault, labels in CONTROLS.items():
        pair = [p for p in planned if p[0] in labels]
        broken = outcomes(tmp_path / fault, pair, fault_env(fault))
        claim.control(f"{DESCRIBED[fault]} ({fault})", len(differing(broken)))

    lists = gate.claim(
        "provenance.order_independent",
        f"the same {len(planned)} runs: each of the {len(IMPORTERS)} gates that import two "
        "packages inside their test (the project under test, and a helper package beside the "
        "gate modules) records the same import_files in every run it is in, listing "
        f"{' and '.join(PACKAGE_INITS)} whether its test imported them first or found them "
        "loaded",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="gates whose import_files differ by run",
        code=("assay.qualify.plugin.imports", "support.robustness.verdict_cases"),
    )
    wrong = imports_differing(import_lists(tmp_path / "runs", planned))
    lists.measure(len(wrong))
    if wrong:
        gate.note("import_files: " + "; ".join(wrong))
    pair = [p for p in planned if p[0] in ("all, -n 1", "all reversed, -n 1")]
    for fault, described in IMPORT_CONTROLS.items():
        outcomes(tmp_path / fault, pair, fault_env(fault))
        lists.control(
            f"{described} ({fault}), in order and reversed",
            len(imports_differing(import_lists(tmp_path / fault, pair))),
        )


def test_gate_selection_runs_exactly_the_gates_whose_reads_changed(gate, tmp_path, monkeypatch):
    """Issue 57: `--gate-select=stale` leaves a gate out only when its record is current. Over
    seeded generated ledgers (three gates, each recorded reading up to three code or data
    files; up to three files changed in the committed tree; in some, one gate's receipt edited
    so it no longer verifies, one gate's run failing, one gate's recorded torch not the
    installed one, or the history unreadable: no .git, a shallow clone), the gates selected
    are exactly those the rule names, and all of them when the history cannot be read."""
    from assay.qualify.judging import select, stale
    from support.robustness.selection_cases import build, drawn, expected

    gate.seed(11)
    cases = drawn(11, 40)

    def wrong_selections(folder: Path) -> int:
        wrong = 0
        for index, case in enumerate(cases):
            root, receipts = build(folder / str(index), case)
            chosen = {g for g in case.reads if select.why_run(receipts, root, g, "cpu").runs}
            wrong += chosen != expected(case)
        return wrong

    def count(attribute: str) -> int:
        return sum(getattr(c, attribute) not in (None, "git") for c in cases)

    claim = gate.claim(
        "select.stale_exactly",
        f"{len(cases)} generated committed ledgers of three gates with recorded code and data "
        f"reads and files then changed; a receipt spoiled in {count('spoiled')}, a failing run "
        f"in {count('failing')}, another recorded torch in {count('moved')}, no readable "
        f"history in {count('history')}: --gate-select=stale selects exactly the gates that "
        "recorded reading a changed file, whose ledger no longer verifies, whose record does "
        "not stand at pass or whose recorded torch differs, and every gate when the history "
        "cannot be read (the rule verify --stale applies to records)",
        kind="correctness",
        threshold=Threshold("==", 0),
        unit="cases selected wrongly",
        code=(
            "assay.qualify.judging.select",
            "assay.qualify.judging.stale",
            "support.robustness.selection_cases",
        ),
    )
    claim.measure(wrong_selections(tmp_path / "cases"))
    controls = {
        "the files a claim opened left out of the check": (
            stale,
            "_LISTS",
            tuple(k for k in stale._LISTS if k != "read_files"),
        ),
        "the recorded environment not compared": (select, "environment_changes", lambda _: []),
        "an unreadable history taken as readable": (select, "history_undecidable", lambda _: None),
    }
    for index, (described, (module, name, blind)) in enumerate(controls.items()):
        with monkeypatch.context() as patch:
            patch.setattr(module, name, blind)
            claim.control(
                f"the same cases with {described}", wrong_selections(tmp_path / f"blind{index}")
            )
