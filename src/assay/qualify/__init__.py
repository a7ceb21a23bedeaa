"""assay.qualify: gates as a pytest plugin, schema-checked receipts and rendered records."""
