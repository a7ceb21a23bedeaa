"""gate-nf4's helpers (see ``gates/support/__init__.py`` for the layout)."""
