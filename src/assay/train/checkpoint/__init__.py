"""Checkpoints: the directory a step is saved in, atomic to write and verified to read
(``directory``), its file layout (``layout``), the optimizer and schedule state it carries
(``state``), and the checks a resume makes against the config (``check``)."""
