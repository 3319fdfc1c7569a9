"""The op table (docs/ops.md): every op type x march, placement, integer kernel, precisions, beside Horizon's list.

:mod:`.probes` builds the tiny probe models, :mod:`.run` runs one through the pipeline, :mod:`.table`
assembles and renders the table, :mod:`.horizon` holds Horizon's published lists. It sits at the top of
the layering (it drives checker, calibrate, compile and simulate), beside the CLI.
"""
