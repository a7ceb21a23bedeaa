"""Helpers for tests and gates. Importing the submodules needs the ``test`` extra."""
