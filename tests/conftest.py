"""Shared pytest setup: hypothesis profiles.

``HYPOTHESIS_PROFILE=nightly`` (see scripts/nightly.sh, step fuzz) selects the nightly profile:
randomized (new examples every night), no deadline, and ten times the examples of the default
run (tests/unit/kernels/test_kernel_edge_properties.py multiplies its per-test budgets by ten; tests without a
budget of their own get 1000 instead of hypothesis's 100). The default profile is hypothesis's
own; the property tests derandomize themselves there, so CI is stable.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "nightly",
    max_examples=1000,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
