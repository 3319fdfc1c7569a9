"""The third-party conformance corpus: models written by others, their export recipes and the runner."""
