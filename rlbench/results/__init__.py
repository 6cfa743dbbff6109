"""Results: the metric vocabulary (``metrics``), the versioned record schema (``records``), the append-only JSONL
store (``store``) and the machine, software and commit fingerprints every record carries (``fingerprint``)."""
