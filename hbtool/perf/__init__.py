"""``hbtool perf``: latency, FPS and DDR traffic of a compiled model on the J5 BPU, from a cost model.

Pipeline (each step its own module):

:mod:`.hardware`   the march's hardware parameters (published / derived / assumed, each with its source)
:mod:`.access`     how data-movement ops walk memory: contiguous runs, bytes per granule
:mod:`.cost`       one op's cycles per unit (tensor, vector, data movement, CPU, SRAM, DDR) + overhead
:mod:`.schedule`   the program order summed to latency; FPS in throughput mode; shares and bounds
:mod:`.report`     console tables and the ``--json`` document
:mod:`.html`       ``perf.html`` with a per-op bar chart and a per-unit timeline (PNG beside it)
:mod:`.levels`     the ablation: what each compiler optimization buys (``--compare-levels``)
:mod:`.run`        the three ways in: an artifact, a config, or an ONNX model on random calibration
"""
