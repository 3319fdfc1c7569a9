"""``debug_parameters.metric``: a built-in error metric, or the user's task metric ``module:function``.

The ranking and the ``--auto`` fix follow this metric, so that a detector is fixed for its
detections and a recogniser for its transcriptions, not only for cosine. A hook is called as
``function(quantized_outputs, float_outputs) -> float`` with dicts of output name to the outputs
stacked over the samples; higher is better. The module is looked up beside the YAML first, then
on ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from hbtool.debug.metrics import BUILTIN, per_output, score
from hbtool.errors import InputError

Outputs = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Metric:
    """What the debugger maximises: ``value(quantized, float)``, higher is better."""

    name: str
    hook: Callable[[Outputs, Outputs], float] | None = None

    @property
    def is_hook(self) -> bool:
        return self.hook is not None

    def value(self, quantized: Outputs, float_: Outputs) -> float:
        if self.hook is None:
            # a built-in metric is a whole-output column: the per-channel scan (per_output's default) is not read
            return score(per_output(float_, quantized, channels=False), self.name)
        try:
            v = float(self.hook(dict(quantized), dict(float_)))
        except Exception as exc:  # the user's code: one line naming it
            raise InputError(f"debug_parameters.metric {self.name} raised {type(exc).__name__}: {str(exc)[:200]}",
                             "fix the metric function; it is called as f(quantized_outputs, float_outputs) with dicts of stacked arrays") from None
        if not math.isfinite(v):
            raise InputError(f"debug_parameters.metric {self.name} returned {v}", "return a finite float, higher is better")
        return v

    def fold_values(self, quantized: Outputs, float_: Outputs, samples: int, folds: int) -> list[float] | None:
        """The metric on each of ``folds`` interleaved folds of the ``samples`` debug samples (sample i in fold
        i mod folds), or None where the outputs do not split by sample or fewer than two samples fall in a fold.

        Why: a task metric on a few dozen samples is coarse (a detector's F1 moves by whole detections), and
        the spread of the difference of two variants over the folds is what says whether the debug set can
        tell them apart at all (:func:`hbtool.debug.auto.paired_noise`)."""
        if self.hook is None or folds < 2 or samples < 2 * folds:
            return None
        arrays = [*quantized.values(), *float_.values()]
        if not arrays or any(np.ndim(a) == 0 or np.shape(a)[0] % samples for a in arrays):
            return None
        def fold(outputs: Outputs, pick: np.ndarray) -> dict[str, np.ndarray]:
            """The rows of the picked samples (a sample may own several rows: a batch)."""
            return {n: np.asarray(a).reshape(samples, -1, *np.shape(a)[1:])[pick].reshape(-1, *np.shape(a)[1:])
                    for n, a in outputs.items()}

        out = []
        for k in range(folds):
            pick = np.arange(k, samples, folds)
            try:
                out.append(self.value(fold(quantized, pick), fold(float_, pick)))
            except InputError:  # a metric undefined on a fold (too few samples for it): no noise estimate
                return None
        return out


def resolve_metric(spec: str, base_dir: Path | None) -> Metric:
    """The metric named by ``spec``; a bad name, module or function is a one-line InputError."""
    text = str(spec).strip()
    if ":" not in text:
        if text.lower() not in BUILTIN:
            raise InputError(f"debug_parameters.metric: '{text}' is neither a built-in metric nor module:function",
                             f"use one of {', '.join(BUILTIN)}, or 'my_metrics:top1' for a function top1 in my_metrics.py")
        return Metric(text.lower())
    module_name, _, func_name = text.partition(":")
    module_name, func_name = module_name.strip(), func_name.strip()
    if not module_name or not func_name.isidentifier():
        raise InputError(f"debug_parameters.metric: '{text}' is not of the form module:function", "write e.g. 'my_metrics:top1'")
    module = _import(module_name, base_dir, text)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise InputError(f"debug_parameters.metric: module '{module_name}' ({getattr(module, '__file__', '?')}) has no function '{func_name}'",
                         "check the function name after the colon")
    return Metric(text, fn)


def _import(module_name: str, base_dir: Path | None, text: str):
    beside = Path(base_dir) / (module_name.replace(".", "/") + ".py") if base_dir is not None else None
    try:
        if beside is not None and beside.is_file():
            spec = importlib.util.spec_from_file_location(f"hbtool_metric_{module_name.replace('.', '_')}", beside)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise InputError(f"debug_parameters.metric: module '{module_name}' not found beside the YAML ({base_dir}) or on PYTHONPATH",
                             f"put {module_name.replace('.', '/')}.py next to the YAML, or add its folder to PYTHONPATH") from None
        raise InputError(f"debug_parameters.metric: importing '{module_name}' failed: {exc}", "install what the metric module imports") from None
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"debug_parameters.metric: importing '{module_name}' failed: {type(exc).__name__}: {str(exc)[:200]}",
                         "fix the metric module so that it imports") from None
