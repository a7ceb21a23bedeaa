"""A run folder: its layout and the files beside the checkpoints (``folder``), the lock that keeps
two runs out of one folder (``lock``), and the state a running trainer reports (``state``)."""
