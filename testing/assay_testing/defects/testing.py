"""Defects in assay_testing: the grader gate-quality scores with."""

from __future__ import annotations

from assay_testing.defects import Defect
from assay_testing.patching import Edit

DEFECTS: tuple[Defect, ...] = (
    Defect(
        "testing.grader.raw_compare",
        "answers compared verbatim: no whitespace, case or punctuation fixes",
        (
            # Inserted at the top, so it wins over testing.grader.prefix_match armed with it.
            Edit(
                "assay_testing.grader:exact_match",
                '    """True when both normalise to the same non-empty text."""\n',
                '    """True when both normalise to the same non-empty text."""\n'
                "    return answer == expected\n",
            ),
        ),
    ),
    Defect(
        "testing.grader.prefix_match",
        "an answer matches when the expected text starts with it (so '' does)",
        (
            Edit(
                "assay_testing.grader:exact_match",
                'normalise(answer) == normalise(expected) and normalise(expected) != ""',
                "normalise(expected).startswith(normalise(answer))",
            ),
        ),
    ),
)
