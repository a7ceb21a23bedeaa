"""gate-robustness's helpers (see ``gates/support/__init__.py`` for the layout)."""
