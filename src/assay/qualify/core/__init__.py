"""The bottom layer of the framework: thresholds and verdicts, the status a receipt derives from
its claims, hashing and reading module constants, running git, and where a project keeps its
gates and receipts. Imports nothing else of ``assay.qualify``."""
