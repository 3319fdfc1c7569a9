"""The published on-board FPS rows and the models that reproduce them (``python -m benchmarks.perf_published``)."""
