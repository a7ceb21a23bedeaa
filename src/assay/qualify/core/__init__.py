"""The bottom layer of the framework: thresholds and verdicts, the status a receipt derives from
its claims, hashing and reading module constants. Imports nothing else of ``assay.qualify``."""
