"""Which class of published on-board measurements a model resembles, and how far off hbtool was on it.

``benchmarks/perf_published.py`` compares the cost model with measured RDK X5 / X3 / Ultra
speeds (``docs/perf.md``). The rows fall into a few classes by op mix, and the error differs by
class; a user estimating a new model wants the error of the class the model belongs to, not
the average. :func:`measurement_class` sorts a costed program by the same rules the benchmark
uses, and :data:`CLASS_ERRORS` holds the benchmark's result per march and class (rows, median
absolute latency and FPS error), written by ``perf_published.py --classes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hbtool.costmodel.schedule import PerfResult

DETECTION = "detection / segmentation (many-output head)"
ATTENTION = "attention or token mixing (transformer-style)"
CNN = "convolutional classifier / backbone"

#: march -> class -> (rows, median |latency error|, median |FPS error|), from the calibration rows
#: (``benchmarks/perf_published.py --cached-only --classes``; docs/perf.md has the rows)
CLASS_ERRORS: dict[str, dict[str, tuple[int, float, float]]] = {
    # issue 33's fit rows (csv rows of the fit families, rebuilt with the publisher's recipe, nv12):
    # ``benchmarks/perf_published.py --families all --cached-only --classes``. Ultra and X3 have no
    # compiled fit row in that split; their entries are the earlier calibration's.
    "bayes": {DETECTION: (2, 0.071, 0.086)},
    "bayes-e": {ATTENTION: (2, 0.226, 0.384), CNN: (7, 0.142, 0.199), DETECTION: (2, 0.129, 0.123)},
    "bernoulli2": {CNN: (3, 0.153, 0.132), DETECTION: (1, 0.067, 0.025)},
}


def _is_attention(res: "PerfResult") -> bool:
    """Products of two run-time tensors (attention; weights are Linear) or LayerNorms; a Softmax alone is a classifier's tail."""
    return any(o.kernel == "LayerNorm" or (o.kernel in ("MatMul", "Log2MatMul") and o.macs) for o in res.ops)


def measurement_class(res: "PerfResult") -> tuple[str, tuple[int, float, float] | None]:
    """(class name, (rows, median |latency err|, median |FPS err|) on that class for the march, or None)."""
    if res.model_outputs >= 3:
        cls = DETECTION
    elif _is_attention(res):
        cls = ATTENTION
    else:
        cls = CNN
    return cls, CLASS_ERRORS.get(res.march, {}).get(cls)
