"""What readers see and check: Markdown records, the index, the site, README spans, ``verify``
and attestations."""
