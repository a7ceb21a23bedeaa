"""The ``assay-cli`` directive: the command-line reference, generated from the command table.

Each command's section is its ``--help`` text as ``assay COMMAND --help`` prints it, built from
the same parser (``assay.cli.dispatch.build_parser``), so the page cannot drift from the CLI.
"""

from __future__ import annotations

import argparse

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _help_block(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text=text)
    block["language"] = "text"  # help text, not code: no highlighting
    return block


class AssayCli(SphinxDirective):
    """One section per command of ``assay``, in the command table's order."""

    def run(self) -> list[nodes.Node]:
        from assay.cli.commands import COMMANDS
        from assay.cli.dispatch import build_parser

        parser = build_parser()
        found = _subparsers(parser)
        out: list[nodes.Node] = [_help_block(parser.format_help())]
        for command in COMMANDS:
            sub = found[command.name]
            section = nodes.section(ids=[f"assay-{command.name}"])
            section += nodes.title(text=f"assay {command.name}")
            section += nodes.paragraph(text=command.help)
            section += _help_block(sub.format_help())
            out.append(section)
        return out


def setup(app: Sphinx) -> dict[str, bool]:
    """Sphinx's entry point for this extension."""
    app.add_directive("assay-cli", AssayCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
