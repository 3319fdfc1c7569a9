"""Error metrics between a float tensor and its quantized counterpart (Horizon's table columns)."""

from __future__ import annotations

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def error_metrics(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``Cosine | L1 | L2 | Chebyshev``: L1/L2 are mean absolute / root-mean-square errors."""
    r = np.asarray(ref, np.float64).reshape(-1)
    g = np.asarray(got, np.float64).reshape(-1)
    d = r - g
    return {
        "cosine": cosine(r, g),
        "l1": float(np.abs(d).mean()) if d.size else 0.0,
        "l2": float(np.sqrt((d**2).mean())) if d.size else 0.0,
        "chebyshev": float(np.abs(d).max()) if d.size else 0.0,
    }


class RunningCosine:
    """Cosine similarity accumulated over many samples without keeping them."""

    def __init__(self) -> None:
        self.dot = 0.0
        self.na = 0.0
        self.nb = 0.0

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        # float32 BLAS dot products: cosine needs ~1e-6 relative precision, not float64 copies
        a = np.ascontiguousarray(a, np.float32).reshape(-1)
        b = np.ascontiguousarray(b, np.float32).reshape(-1)
        self.dot += float(np.dot(a, b))
        self.na += float(np.dot(a, a))
        self.nb += float(np.dot(b, b))

    @property
    def value(self) -> float:
        if self.na == 0 and self.nb == 0:
            return 1.0
        if self.na == 0 or self.nb == 0:
            return 0.0
        return self.dot / np.sqrt(self.na * self.nb)


class RunningErrors:
    """Cosine / L1 / L2 / Chebyshev accumulated over samples."""

    def __init__(self) -> None:
        self.cos = RunningCosine()
        self.abs_sum = 0.0
        self.sq_sum = 0.0
        self.n = 0
        self.cheb = 0.0

    def update(self, ref: np.ndarray, got: np.ndarray) -> None:
        r = np.ascontiguousarray(ref, np.float32).reshape(-1)
        g = np.ascontiguousarray(got, np.float32).reshape(-1)
        d = r - g
        self.cos.update(r, g)
        self.abs_sum += float(np.abs(d).sum(dtype=np.float64))
        self.sq_sum += float(np.dot(d, d))
        self.n += d.size
        self.cheb = max(self.cheb, float(np.abs(d).max()) if d.size else 0.0)

    def result(self) -> dict[str, float]:
        n = max(self.n, 1)
        return {"cosine": self.cos.value, "l1": self.abs_sum / n, "l2": float(np.sqrt(self.sq_sum / n)), "chebyshev": self.cheb}
