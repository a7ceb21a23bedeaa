"""Judging: which receipt counts (standings), staleness against the tree, baselines."""
