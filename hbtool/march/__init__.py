"""Hardware descriptions (one YAML file per march) and the per-op support rules."""

from hbtool.march.description import March, load_march, SUPPORTED_MARCHES

__all__ = ["March", "load_march", "SUPPORTED_MARCHES"]
