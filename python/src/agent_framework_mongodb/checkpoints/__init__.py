"""Checkpoint storage internals: options, scope, codec, documents, sequences, paging, indexes, storage."""
