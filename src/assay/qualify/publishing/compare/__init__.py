"""``assay compare OLD NEW``: what each claim's change was (``changes``), the two sides read from
receipts, folders or revisions (``sides``), and the report printed (``report``)."""
