"""``hbtool perf``: latency, FPS and DDR traffic of a compiled model on the BPU, reported.

The numbers come from the cost model (:mod:`hbtool.costmodel`, which the compiler also decides
with); this package reports them and drives the runs:

:mod:`.report`     console tables (the ``--json`` document is :mod:`hbtool.costmodel.document`)
:mod:`.html`       ``perf.html`` with a per-op bar chart and a per-unit timeline (PNG beside it)
:mod:`.levels`     the ablation: what each compiler optimization buys (``--compare-levels``)
:mod:`.run`        the three ways in: an artifact, a config, or an ONNX model on random calibration
"""
