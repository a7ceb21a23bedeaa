"""The plugin's options are prefixed, have ini twins, avoid the space-form rootdir trap, and
loading the plugin imports nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from gatekit import PASSING_GATE


def test_bare_options_are_gone_and_prefixed_ones_work(gates):
    gates.write("opt", PASSING_GATE.format(value="1e-4"))
    old = gates.pytester.runpytest("--receipts", "x", *map(str, gates.modules))
    assert old.ret == 4  # usage error: the bare option no longer exists
    old.stderr.fnmatch_lines(["*unrecognized arguments: --receipts*"])
    assert gates.run("--gate-no-render").ret == 0
    assert gates.only_receipt("opt")["status"] == "pass"
    assert not (gates.records / "opt.md").exists()


def test_ini_settings_place_receipts_and_records_and_switch_rendering(gates):
    gates.pytester.makeini(
        """
        [pytest]
        gate_receipts = out/receipts
        gate_records = out/md
        gate_render = false
        gate_device = cpu
        """
    )
    gates.write("ini", PASSING_GATE.format(value="1e-4"))
    result = gates.pytester.runpytest("-p", "no:cacheprovider", *map(str, gates.modules))
    assert result.ret == 0, result.stdout.str()
    out = gates.pytester.path / "out"
    assert len(list((out / "receipts" / "ini").glob("*.json"))) == 1
    assert not (out / "md").exists()  # gate_render = false
    gates.pytester.makeini("[pytest]\ngate_receipts = out/receipts\ngate_records = out/md\n")
    assert gates.pytester.runpytest("-p", "no:cacheprovider", *map(str, gates.modules)).ret == 0
    assert (out / "md" / "ini.md").is_file()


def test_space_form_outside_the_rootdir_is_refused_with_the_equals_form(gates, tmp_path_factory):
    gates.write("space", PASSING_GATE.format(value="1e-4"))
    outside = tmp_path_factory.mktemp("elsewhere")
    result = gates.pytester.runpytest(
        "--gate-baseline", str(outside), "--gate-receipts=r", *map(str, gates.modules)
    )
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*write --gate-baseline={outside}*"])


PROBE = """
import sys

def test_nothing_heavy_loaded():
    import assay.qualify.plugin.hooks  # loaded by pytest11 before this test runs
    heavy = [m for m in ("jinja2", "jsonschema", "torch", "assay.qualify.ledger.receipt",
                         "assay.qualify.publishing.render", "assay.qualify.plugin.gate")
             if m in sys.modules]
    assert heavy == [], heavy
"""


def test_a_session_without_gates_imports_no_jinja2_jsonschema_or_torch(pytester, monkeypatch):
    pytester.makepyfile(test_probe=PROBE)
    # only our plugin: other installed plugins may import what they like
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        "-p", "assay.qualify.plugin.hooks", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    assert not (pytester.path / "records").exists()


def test_plugin_import_cost_is_reported():
    """Start-up cost of the plugin module, printed (never asserted: no timing asserts)."""
    code = textwrap.dedent(
        """
        import json, sys, time
        import pytest
        before = set(sys.modules)
        t = time.perf_counter()
        import assay.qualify.plugin.hooks
        ms = (time.perf_counter() - t) * 1e3
        print(json.dumps({"ms": ms, "modules": sorted(set(sys.modules) - before)}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    print(f"plugin import: {report['ms']:.1f} ms, new modules: {report['modules']}")
    assert not {"jinja2", "jsonschema", "torch"} & set(report["modules"])
