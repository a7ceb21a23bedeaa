"""Rendering and publishing: Markdown records, the index, the site and the README spans."""
