"""The digits data set prepared as 32x32 "rgb" uint8 images with a deterministic split."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

SPLIT_SEED = 0
HELDOUT_FRACTION = 0.3
SIZE = 32


def digits_images() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits as (uint8 N x 3 x 32 x 32, int64 N)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) * (255.0 / 16.0))[:, None]  # N,1,8,8
    x = F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    x = x.round().clamp(0, 255).to(torch.uint8).repeat(1, 3, 1, 1)
    return x.numpy(), digits.target.astype(np.int64)


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices): a fixed-seed 70/30 permutation split."""
    perm = np.random.RandomState(SPLIT_SEED).permutation(n)
    n_held = int(round(n * HELDOUT_FRACTION))
    return np.sort(perm[n_held:]), np.sort(perm[:n_held])


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_heldout, y_heldout), images uint8 N x 3 x 32 x 32."""
    x, y = digits_images()
    tr, te = split(len(y))
    return x[tr], y[tr], x[te], y[te]
