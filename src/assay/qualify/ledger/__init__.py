"""Receipts and their ledgers: the receipt format, the hash chain, git history and corrections,
signatures and GPU archives."""
