"""``assay render`` and ``assay verify`` wiring: exit codes and one line per problem."""

from __future__ import annotations

import argparse
import json

from gatekit import PASSING_GATE

from assay.qualify.cli_commands import add_render_and_verify


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="assay")
    add_render_and_verify(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_verify_exits_zero_when_clean_and_one_with_problems(gates, capsys):
    gates.write("cli", PASSING_GATE.format(value="0"))
    assert gates.run("--gate-no-render").ret == 0
    dirs = ["--receipts", str(gates.receipts), "--records", str(gates.records)]
    assert _main(["verify", *dirs]) == 1  # the record was never rendered
    assert "record missing" in capsys.readouterr().out
    assert _main(["render", *dirs, "--json"]) == 0
    rendered = json.loads(capsys.readouterr().out)["records"]
    assert rendered == [str(gates.records / "cli.md")]
    assert _main(["verify", *dirs, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["problems"]) == (True, [])
    assert report["standings"] == {"cli": {"status": "pass", "summary": "pass"}}
    assert all(n.startswith("history not checked") for n in report["notes"])  # no git here


def test_render_refuses_tampered_receipts_with_exit_two(gates, capsys):
    gates.write("cli", PASSING_GATE.format(value="0"))
    assert gates.run().ret == 0
    path = gates.receipt_files("cli")[0]
    path.write_text(path.read_text("utf-8").replace('"pass"', '"fail"', 1), encoding="utf-8")
    assert _main(["render", "--receipts", str(gates.receipts)]) == 2
    assert path.name in capsys.readouterr().err


def test_verify_into_a_closed_pipe_ends_quietly(published):
    """``assay verify | head``: the reader closed the pipe; no "Broken pipe" error line."""
    import subprocess
    import sys

    argv = [
        sys.executable,
        "-m",
        "assay.cli",
        "verify",
        "--receipts",
        str(published.receipts),
        "--records",
        str(published.records),
    ]
    reader = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.close()  # gone before a byte arrives
    err = reader.stderr.read().decode()
    assert reader.wait() == 141 and err == ""
