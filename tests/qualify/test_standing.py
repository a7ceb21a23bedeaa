"""One standing per gate: the record, the index, both HTML pages and ``verify`` say the same
thing for every way a reader could be shown "pass" that the evidence does not back."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gates"))

from assay.cli import main
from assay.qualify.judging.standing import BRIEF_LIMIT
from assay.qualify.ledger.chain import ledger_path, read_ledger
from assay.qualify.publishing.site import build_site

GATE = """
def test_good(gate):
    c = gate.claim("good", "agrees", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure(0.0)
    c.control("broken", 1.0)


def test_bad(gate):
    c = gate.claim("bad", "agrees too", kind="correctness", threshold=Threshold("<=", 1e-3))
    c.measure({bad})
    c.control("broken", 1.0)
"""


def five_views(gates, tmp_path: Path, capsys) -> dict[str, str]:
    """The gate's record, the index, the site's gate page and index, and verify's JSON."""
    site = tmp_path / "site"
    build_site(gates.receipts, gates.records, site, gates.pytester.path)
    capsys.readouterr()
    main(["verify", "--json", f"--receipts={gates.receipts}", f"--records={gates.records}"])
    verified = json.loads(capsys.readouterr().out)
    return {
        "record": (gates.records / "demo.md").read_text("utf-8"),
        "index": (gates.records / "README.md").read_text("utf-8"),
        "page": (site / "demo.html").read_text("utf-8"),
        "site index": (site / "index.html").read_text("utf-8"),
        "verify": json.dumps(verified["standings"]["demo"]),
    }


def status_in(view: str, text: str) -> str:
    """The status word a view shows for gate demo."""
    if view == "record":
        return re.search(r"\*\*Status: ([A-Z ]+)\*\*", text).group(1).lower()
    if view == "page":
        return re.search(r"Status: ([A-Z ]+)</strong>", text).group(1).lower()
    if view == "index":
        row = next(line for line in text.splitlines() if line.startswith("| [demo]"))
        return row.split(" | ")[3].split(":")[0].strip()
    if view == "site index":
        return re.search(r'<td class="([a-z ]+)">', text).group(1)
    return json.loads(text)["status"]


# Views that show a gate's standing in brief and link to its page, which holds the rest.
BRIEF_VIEWS = {"index": "demo.md", "site index": "demo.html"}


def status_cell(view: str, text: str) -> str:
    """The whole status cell an index view shows for gate demo, markup unescaped."""
    if view == "index":
        row = next(line for line in text.splitlines() if line.startswith("| [demo]"))
        return row.split(" | ")[3].replace("\\", "")
    return html.unescape(re.search(r'<td class="[a-z ]+">(.*?)</td>', text).group(1))


def assert_agree(views: dict[str, str], status: str, *facts: str) -> None:
    """Every view shows ``status``. The record, the site's page and verify show every fact;
    an index shows the status word and at most BRIEF_LIMIT characters of why, each of its
    phrases taken from the record's status line, and links to the record."""
    record_status = re.search(r"\*\*Status: [A-Z ]+\*\*(.*)", views["record"]).group(1)
    for name, text in views.items():
        assert status_in(name, text) == status, (name, text[:400])
        if name in BRIEF_VIEWS:
            cell = status_cell(name, text)
            assert cell.split(":")[0] == status and BRIEF_VIEWS[name] in text, (name, cell)
            why = cell.removeprefix(status).removeprefix(": ")
            assert len(why) <= BRIEF_LIMIT + 3, (name, cell)  # and '; …' when it was cut
            for part in re.split(r"; |, | \(|\)$", why.removesuffix("; …")):
                assert part.removesuffix("…") in record_status.replace("\\", ""), (name, part)
            continue
        for fact in facts:
            assert fact in text, (name, fact)


def test_a_partial_run_after_a_failing_complete_run_never_shows_pass(gates, tmp_path, capsys):
    gates.write("demo", GATE.format(bad="0.5"))
    assert gates.run().ret != 0
    assert gates.run("-k", "good").ret == 0  # a partial run that passes
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "fail", "bad")
    assert "Partial runs after the newest complete run" in views["record"]
    assert "not a verdict" in views["page"]


def test_only_partial_runs_give_no_complete_run(gates, tmp_path, capsys):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run("-k", "good").ret == 0
    assert_agree(five_views(gates, tmp_path, capsys), "no complete run")


def _vanish(gates, how: str, bad: str) -> None:
    """Make test_bad vanish from the gate's next run, in one of the ways an author might."""
    if how == "skip mark":
        gates.write(
            "demo",
            GATE.format(bad=bad).replace("def test_bad", "@pytest.mark.skip\ndef test_bad"),
        )
        gates.modules[0].write_text("import pytest\n" + gates.modules[0].read_text())
    elif how == "collection hook":
        gates.pytester.makeconftest(
            "def pytest_collection_modifyitems(items):\n"
            "    items[:] = [i for i in items if 'bad' not in i.name]\n"
        )
    else:
        gates.write("demo", GATE.format(bad=bad).split("def test_bad")[0])


@pytest.mark.parametrize("how", ["skip mark", "collection hook", "deleted"])
def test_a_vanished_failing_claim_still_fails_the_gate(gates, tmp_path, capsys, how):
    gates.write("demo", GATE.format(bad="0.5"))
    assert gates.run().ret != 0
    _vanish(gates, how, "0.5")
    gates.run()
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "fail", "bad")


@pytest.mark.parametrize("how", ["skip mark", "deleted"])
def test_a_vanished_passing_claim_is_missing_not_pass(gates, tmp_path, capsys, how):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    _vanish(gates, how, "0.0")
    assert gates.run().ret == 0  # the run itself passes: only the ledger knows
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "incomplete", "bad")
    assert "Missing claims: 1" in views["record"]


def test_a_claim_removed_by_a_conftest_hook_leaves_a_partial_run(gates, tmp_path, capsys):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    _vanish(gates, "collection hook", "0.0")
    assert gates.run().ret == 0
    newest = json.loads(gates.receipt_files("demo")[-1].read_text())
    assert (
        newest["run"]["partial"] and "1 of its 2 collected tests" in newest["run"]["partial_reason"]
    )
    assert_agree(five_views(gates, tmp_path, capsys), "pass")


def test_a_dated_correction_retires_a_missing_claim_and_stays_listed(gates, tmp_path, capsys):
    gates.write("demo", GATE.format(bad="0.5"))
    assert gates.run().ret != 0
    first = gates.only_receipt("demo")["receipt_sha256"]
    retire = (
        "\n\ndef test_retire(gate):\n"
        f"    gate.correct({first!r}, 'bad', 'the bad claim measured a removed feature')\n"
    )
    gates.write("demo", GATE.format(bad="0.5").split("def test_bad")[0] + retire)
    assert gates.run().ret == 0
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "pass", "1 claim retired after failing: bad")
    for name in ("record", "page"):
        assert "Retired claims: 1" in views[name]
        assert "removed feature" in views[name]


def test_a_skipped_claim_test_is_not_a_pass(gates, tmp_path, capsys):
    gates.write(
        "demo",
        GATE.format(bad="0.0")
        + "\n\ndef test_later(gate):\n    import pytest\n    pytest.skip('needs a GPU')\n",
    )
    assert gates.run().ret == 0
    receipt = gates.only_receipt("demo")
    assert receipt["run"]["skipped"][0]["reason"] == "needs a GPU"
    assert_agree(five_views(gates, tmp_path, capsys), "inconclusive", "1 test skipped")


def test_a_run_that_regressed_against_its_baseline_is_headlined_fail(gates, tmp_path, capsys):
    gates.write("demo", GATE.format(bad="0.0"))
    baseline = gates.pytester.path / "base"
    assert gates.run(receipts=baseline).ret == 0
    gates.write("demo", GATE.format(bad="0.0009"))  # passes its threshold, worse than 0.0
    gates.run(f"--gate-baseline={baseline}")
    assert_agree(five_views(gates, tmp_path, capsys), "fail", "regression")


def test_the_site_shows_what_the_record_shows(gates, tmp_path, capsys):
    gates.write(
        "demo",
        GATE.format(bad="0.5") + "\n\nimport pytest\n\n@pytest.fixture\ndef broken():\n"
        "    raise RuntimeError('setup broke here')\n\n"
        "def test_setup(gate, broken):\n    pass\n",
    )
    (gates.pytester.path / "pytest.ini").write_text("[pytest]\ngate_project = toylib==1.2.3\n")
    gates.run()
    views = five_views(gates, tmp_path, capsys)
    for fact in (
        "Project under test: toylib 1.2.3",
        "setup error",
        "setup broke here",
        "Failed tests: 2",
        "test_bad",
        "unknown (not a git checkout)",
    ):
        assert fact in views["record"], fact
        assert fact in views["page"], fact


def test_same_second_receipts_follow_the_ledger_not_the_sha(tmp_path):
    from assay.qualify.judging.standing import gate_standing
    from assay.qualify.ledger.chain import write_receipt
    from assay.qualify.publishing.index import render_all
    from support.faults import tamper_cases

    synthetic_receipt = tamper_cases.synthetic_receipt

    receipts = tmp_path / "records" / "receipts"
    passing = synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    failing = synthetic_receipt("2026-01-01T00:00:00Z", 0.5, "0" * 64)
    failing["status"] = "fail"
    failing["claims"][0]["verdict"] = "fail"
    failing["claims"][0]["margin"] = 1e-3 - 0.5
    write_receipt(passing, receipts)
    write_receipt(failing, receipts)  # same second; the sha order is a coin toss, not a clock
    render_all(receipts, tmp_path / "records", tmp_path)
    assert gate_standing(receipts, "demo").status == "fail"
    assert "**Status: FAIL**" in (tmp_path / "records" / "demo.md").read_text()


def test_a_hand_edit_inside_a_tree_span_fails_verify(gates, capsys):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    index = gates.records / "README.md"
    index.write_text(index.read_text().replace("<!--stale-->current", "<!--stale-->all fine"))
    assert main(["verify", f"--receipts={gates.receipts}", f"--records={gates.records}"]) == 1
    assert "index out of sync" in capsys.readouterr().out


def test_verify_of_nothing_is_an_error(tmp_path, capsys):
    missing, empty = tmp_path / "none", tmp_path / "empty"
    empty.mkdir()
    (empty / "demo").mkdir()  # a gate folder with no receipt in it is still nothing
    for command in ("verify", "publish"):
        extra = [f"--html={tmp_path / 'site'}"] if command == "publish" else []
        assert main([command, f"--receipts={missing}", *extra]) == 2
        out = capsys.readouterr()
        assert out.err == f"assay {command}: {missing}: no such receipts folder\n"
        assert out.out == ""
        assert main([command, f"--receipts={empty}", *extra]) == 2
        assert "holds no receipts" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_publish_refuses_a_ledger_verify_rejects_unless_told_and_then_says_so(
    gates, tmp_path, capsys
):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    assert gates.run().ret == 0
    gates.receipt_files("demo")[0].unlink()  # a published receipt deleted
    site = tmp_path / "site"
    args = ["publish", f"--receipts={gates.receipts}", f"--records={gates.records}"]
    assert main([*args, f"--html={site}"]) == 1
    assert not site.exists()
    assert "deleted" in capsys.readouterr().err
    assert main([*args, f"--html={site}", "--allow-broken"]) == 0
    for page in ("index.html", "demo.html"):
        text = (site / page).read_text()
        assert "do not verify" in text and "deleted" in text


def test_gate_no_write_leaves_the_tree_byte_identical(gates):
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    before = {p: p.read_bytes() for p in gates.pytester.path.rglob("*") if p.is_file()}
    result = gates.run("--gate-no-write")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*not written (--gate-no-write): gate 'demo': pass*"])
    after = {p: p.read_bytes() for p in gates.pytester.path.rglob("*") if p.is_file()}
    assert after == before


def test_the_subject_is_the_version_the_gates_imported(gates, tmp_path, capsys):
    pkg = gates.pytester.path / "site" / "toylib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    info = pkg.parent / "toylib-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toylib\nVersion: 1.0\n")
    (info / "RECORD").write_text("toylib/__init__.py,,\n")
    (gates.pytester.path / "pyproject.toml").write_text(
        '[project]\nname = "toylib"\nversion = "2.0"\n'
    )
    gates.pytester.syspathinsert(pkg.parent)
    gates.write(
        "demo",
        "import toylib\n" + GATE.format(bad="0.0"),
    )
    assert gates.run().ret == 0
    subject = gates.only_receipt("demo")["subject"]
    assert (subject["name"], subject["version"], subject["declared"]) == ("toylib", "1.0", "2.0")
    record = (gates.records / "demo.md").read_text()
    assert "version 2.0 is declared, but the version the gates imported is 1.0" in record


def test_a_declared_headline_leads_the_index_and_the_record(gates):
    gates.write("demo", 'HEADLINE = "bad"\n' + GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    assert gates.only_receipt("demo")["headline_claim"] == "bad"
    index = (gates.records / "README.md").read_text()
    assert "| bad: 0 (threshold &lt;= 0.001) pass |" in index
    assert "Headline claim: bad: 0" in (gates.records / "demo.md").read_text()
    gates.write("demo", GATE.format(bad="0.0"))  # no HEADLINE: the first claim, labelled
    assert gates.run().ret == 0
    assert (
        "good: 0 (threshold &lt;= 0.001) pass \\[first claim: the gate declares no headline\\]"
        in (gates.records / "README.md").read_text()
    )


def test_readme_figures_come_from_the_receipts_and_verify_checks_them(gates, capsys):
    readme = gates.pytester.path / "README.md"
    readme.write_text("Where it stands: <!--standing:demo-->1.4x faster!<!--/standing-->\n")
    gates.write("demo", GATE.format(bad="0.5"))
    gates.run()
    dirs = [f"--receipts={gates.receipts}", f"--records={gates.records}"]
    assert main(["verify", *dirs]) == 1  # the hand-typed figure is not what the receipts say
    assert "standing span differs" in capsys.readouterr().out
    assert main(["render", *dirs]) == 0
    text = readme.read_text()
    assert "1.4x" not in text and "gate-demo: **fail" in text
    assert main(["verify", *dirs]) == 0


def test_one_claim_is_singular_and_absent_libraries_get_no_column():
    from assay.qualify.publishing.view import gate_view
    from assay.qualify.publishing.wording import counts_text
    from support.faults.tamper_cases import synthetic_receipt

    receipt = synthetic_receipt("2026-01-01T00:00:00Z", 0.0, "0" * 64)
    receipt["receipt_sha256"] = "a" * 64
    assert counts_text(receipt).startswith("1 claim: 1 pass")
    from assay.qualify.judging.standing import standing_of

    columns = [k for k, _ in gate_view(standing_of("demo", [receipt]))["environment"]]
    assert columns == ["Device", "CPU", "Python", "OS"]  # no torch, CUDA or bitsandbytes


def test_a_failing_partial_run_after_a_passing_complete_run_fails_the_gate(gates, tmp_path, capsys):
    """Issue 39, case 1: the environment changes and ``pytest -x`` stops at the first claim,
    which now fails. The newest evidence is a failure: no view may say pass."""
    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    gates.write("demo", GATE.format(bad="0.5").replace("c.measure(0.0)", "c.measure(0.5)", 1))
    assert gates.run("-x").ret != 0
    newest = json.loads(gates.receipt_files("demo")[-1].read_text())
    assert newest["run"]["partial"], newest["run"]
    assert_agree(five_views(gates, tmp_path, capsys), "fail", "good", "partial run")


def test_a_failing_partial_run_on_another_device_fails_the_gate(gates, tmp_path, capsys):
    """The same across devices: cpu passes complete; a cuda run that fails a claim and
    stops early leaves the gate at fail, not at cpu's pass."""
    from gatekit import SEES_CUDA

    gates.write("demo", GATE.format(bad="0.0"))
    assert gates.run().ret == 0
    gates.pytester.makeconftest(SEES_CUDA)
    gates.write("demo", GATE.format(bad="0.5").replace("c.measure(0.0)", "c.measure(0.5)", 1))
    assert gates.run("-x", "--gate-device=cuda").ret != 0
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "fail", "cuda: fail")


UNIT = """
def test_time(gate):
    c = gate.claim("t", "fast enough", kind="correctness", threshold=Threshold("<=", {bound}),
                   unit="{unit}")
    c.measure({value})
    c.control("slow", 1e9)
"""


def test_a_bound_moved_to_another_unit_never_clears_a_failure(gates, tmp_path, capsys):
    """5 ms fails <= 1 ms; 0.005 s under <= 0.01 s is the same 5 ms under a 10 ms bound: a
    looser bound, not the same one, so the failure stands and the change shows."""
    gates.write("demo", UNIT.format(bound=1, unit="ms", value=5))
    assert gates.run().ret != 0
    gates.write("demo", UNIT.format(bound=0.01, unit="s", value=0.005))
    assert gates.run().ret == 0
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "fail", "bound changed", "1 ms", "0.01 s")


def test_a_bound_is_shown_in_full(gates):
    gates.write("demo", UNIT.format(bound=5.0000001, unit="x", value=5.0).replace("<=", "<"))
    assert gates.run().ret == 0
    record = (gates.records / "demo.md").read_text("utf-8")
    assert "threshold &lt; 5.0000001 x" in record


def _failure_rows(text: str) -> list[list[str]]:
    """The rows of a record's table of failures that no later complete run passed."""
    table = text.split("**Failures in the ledger that no later complete run has passed: ")[1]
    rows = [line for line in table.split("\n\n")[1].splitlines() if line.startswith("| ")]
    return [row.strip("| ").split(" | ") for row in rows[1:]]  # past the header


def test_a_claim_that_failed_in_many_runs_is_one_row_that_counts_them(gates, tmp_path, capsys):
    """Three complete runs fail claim bad under two bounds: one row counts 3, names the first
    and the last run and both bounds; nothing of the three runs is dropped from the page."""
    gates.write("demo", GATE.format(bad="0.5"))
    for _ in range(2):
        assert gates.run().ret != 0
    gates.write(
        "demo",
        GATE.format(bad="0.5").replace("1e-3))\n    c.measure(0.5", "1e-2))\n    c.measure(0.5"),
    )
    assert gates.run().ret != 0
    views = five_views(gates, tmp_path, capsys)
    assert_agree(views, "fail", "bad")
    record = views["record"]
    assert "no later complete run has passed: 3**" in record
    (row,) = _failure_rows(record)
    _device, what, times, first, last, bounds, now_bound, now = row
    entries, problems = read_ledger(ledger_path(gates.receipts, "demo"))
    shas = [sha[:12] for sha, _ in entries]
    assert problems == [] and len(shas) == 3
    assert (what, times) == ("claim bad", "3")
    assert first.startswith(shas[0]) and last.startswith(shas[-1])
    assert "0.001" in bounds and "0.01" in bounds and "0.01" in now_bound
    assert now == "stands: it fails the gate"
    assert "<td>3</td>" in views["page"]  # the site's page shows the same row
