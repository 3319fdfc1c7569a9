"""The cost model: what an op of the integer program costs on the march's BPU, and the schedule.

The compiler decides with it (the memory plan prices row-band tiling by it) and ``hbtool perf``
reports it, so it sits below both, the way Vela's ``npu_performance.py`` sits below its
scheduler. It reads the march's hardware description and the kernels; it imports nothing from
``compiler/``, ``perf/``, ``simulator/`` or ``quant/`` (``tests/unit/test_import_layers.py``).

:mod:`.hardware`   the march's hardware parameters (published / derived / assumed, each with its source)
:mod:`.access`     how data-movement ops walk memory: contiguous runs, bytes per granule
:mod:`.cost`       one op's cycles per unit (tensor, vector, data movement, CPU, SRAM, DDR) + overhead
:mod:`.schedule`   the program order summed to latency; FPS in throughput mode; shares and bounds
:mod:`.document`   the estimate as the ``--json`` document (``perf --json``, the compiler's layer details)
:mod:`.classes`    which class of published measurements a model resembles, and hbtool's error on it
"""
