"""hbtool's benchmarks, as a package run from the repository root: ``python -m benchmarks.<script> [options]``.

Shared by every script: :mod:`.paths` (where models, outputs and outside references are, from the
environment), :mod:`.runner` (one hbtool CLI stage in a subprocess), :mod:`.configs` (writing a YAML
config, the corpus config), :mod:`.tables` (markdown tables and result files).
"""
