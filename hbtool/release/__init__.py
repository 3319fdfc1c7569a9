"""What a CI job or a release job needs on top of the stages: gates, JUnit, release bundles, verify, diff.

``gates`` measures a compiled artifact against ``gate_parameters``; ``junit`` renders the verdict for
CI systems; ``bundle`` writes a reproducible release folder with its ``manifest``; ``verify`` checks
such a folder again; ``diff`` compares two of them. A failed gate is :class:`hbtool.errors.GateFailed`
(exit code 4).
"""
