"""Training data: JSONL rows read and validated (``rows``), turned into scored tokens
(``masks``), and batched in a resumable deterministic order (``dataset``)."""
