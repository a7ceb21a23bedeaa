"""A pytest plugin for gate-mutation's runs over a mutant's gate tests (``-p
assay_testing.stop_at_claim``): the session stops after the first test in which a gate claim
failed, and goes on past tests that failed with no claim failing (a gate test that raised under
the mutant), where ``-x`` would stop at the first failure of either kind and hide a claim that a
later test would have failed."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from assay.qualify.plugin.session import VERDICT_KEY


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # the gate plugin marks a test whose claim failed (in its call or at its fixture's teardown)
    if report.failed and any(key == VERDICT_KEY for key, _ in item.user_properties):
        item.session.shouldfail = f"a gate claim failed in {item.nodeid}"  # as -x does
    return report
