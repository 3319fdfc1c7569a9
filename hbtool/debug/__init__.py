"""``hbtool debug``: find the nodes that lose accuracy, fix them automatically, show the price in FPS.

The J5 workflow is PTQ, then error analysis, then int16 or CPU for the few nodes that need it.
This package is that second and third step:

* ``session.py``   the calibrated model of the config (calibrated in-process, statistics kept for
                   re-quantizing), the debug samples and the float reference outputs;
* ``masked.py``    one onnxruntime model of the calibrated graph whose every fake-quantizer is
                   switched on or off by a mask input, so each analysis is a feed, not a new model;
* ``analysis/``    op error (isolated), model error (accumulated, jumps) and range flags;
* ``sensitivity.py`` quantize-only / de-quantize-only rankings, weights and activations apart;
* ``auto.py``      the remedies, cheapest first, each measured (cosine per output, user metric, FPS);
* ``metrics.py`` / ``metrics_hook.py`` the error metrics (with their direction) and the user's task metric;
* ``report_html.py`` / ``report_console.py`` the HTML report with its PNG plots, the rich tables;
* ``run.py``       the library entry the CLI wraps, and the files it writes.
"""
