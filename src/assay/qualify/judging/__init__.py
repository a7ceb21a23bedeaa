"""Judging: thresholds, standings (which receipt counts), staleness, baselines and verification."""
