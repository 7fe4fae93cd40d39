"""The host's vocabulary: records, settings, texts, approval cards, credentials. No I/O but reading token files."""
