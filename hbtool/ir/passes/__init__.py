"""Float graph optimizations: each module one rewrite, listed in run order in ``FLOAT_PASSES``."""
