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


def output_channel_axis(shape: tuple[int, ...] | list[int], layout: str | None = None) -> int | None:
    """The axis an output's channels lie on: 1, or the last axis of an NHWC or rank-2 output.

    Why: a model output often concatenates quantities of unrelated ranges (a detector's box
    pixels beside its class scores); judged as one tensor, the large channels hide the small
    ones. ``None`` for a rank-0/1 output, which is one channel."""
    rank = len(shape)
    if rank < 2:
        return None
    if rank == 2 or (layout or "").upper() in ("NHWC", "NLC", "NWC"):
        return rank - 1
    return 1


def _channels_first(x: np.ndarray, axis: int | None) -> np.ndarray:
    x = np.asarray(x)
    if axis is None:
        return x.reshape(1, -1)
    return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)


class RunningChannelErrors:
    """Cosine and SNR of every channel of one output, accumulated over samples.

    One definition used wherever an output is reported or compared (calibrate, debug,
    ``simulate --compare``, the gates): a channel quantized to zero shows as cosine 0 and
    an SNR near 0 dB even when the whole output's cosine is 0.99."""

    def __init__(self, axis: int | None) -> None:
        self.axis = axis
        self.dot = self.na = self.nb = self.err = None

    def update(self, ref: np.ndarray, got: np.ndarray) -> None:
        r = _channels_first(np.asarray(ref, np.float64), self.axis)
        g = _channels_first(np.asarray(got, np.float64), self.axis)
        if self.dot is None:
            self.dot, self.na, self.nb, self.err = (np.zeros(r.shape[0]) for _ in range(4))
        self.dot += (r * g).sum(1)
        self.na += (r * r).sum(1)
        self.nb += (g * g).sum(1)
        self.err += ((r - g) ** 2).sum(1)

    @property
    def cosine(self) -> np.ndarray:
        """Per channel; 1 where both are all zero, 0 where exactly one is."""
        if self.dot is None:
            return np.ones(0)
        denom = np.sqrt(self.na * self.nb)
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(denom > 0, self.dot / np.where(denom > 0, denom, 1), 0.0)
        return np.where((self.na == 0) & (self.nb == 0), 1.0, c)

    @property
    def snr_db(self) -> np.ndarray:
        """Per channel signal-to-noise ratio in dB (inf where the channel is exact)."""
        if self.dot is None:
            return np.ones(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            snr = 10 * np.log10(np.where(self.err > 0, self.na / np.where(self.err > 0, self.err, 1), np.inf))
        snr = np.where(self.err == 0, np.inf, snr)
        return np.where((self.na == 0) & (self.err > 0), -np.inf, snr)


def channel_errors(ref: np.ndarray, got: np.ndarray, axis: int | None) -> RunningChannelErrors:
    """Per-channel cosine / SNR of one pair of tensors (see :class:`RunningChannelErrors`)."""
    acc = RunningChannelErrors(axis)
    acc.update(ref, got)
    return acc
