"""Per-channel output metrics: a channel quantized to zero is seen even when the whole output looks fine."""

import numpy as np

from hbtool.io.metrics import RunningChannelErrors, channel_errors, cosine, output_channel_axis


def test_channel_axis_rule():
    assert output_channel_axis((1, 84, 8400)) == 1
    assert output_channel_axis((4, 10)) == 1
    assert output_channel_axis((1, 8, 8, 3), "NHWC") == 3
    assert output_channel_axis((5,)) is None
    assert output_channel_axis(()) is None


def test_zeroed_score_channels_are_seen_behind_large_box_channels():
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 320, (1, 4, 500))
    scores = rng.uniform(0, 0.05, (1, 18, 500))
    ref = np.concatenate([boxes, scores], 1)
    got = ref.copy()
    got[:, 4:] = 0
    assert cosine(ref, got) > 0.99
    e = channel_errors(ref, got, output_channel_axis(ref.shape))
    assert np.all(e.cosine[:4] == 1) and np.all(e.cosine[4:] == 0)
    assert np.all(np.isinf(e.snr_db[:4])) and np.allclose(e.snr_db[4:], 0)


def test_running_equals_one_shot():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 2, 6, 5, 5)), rng.normal(size=(3, 2, 6, 5, 5))
    acc = RunningChannelErrors(1)
    for i in range(3):
        acc.update(a[i], b[i])
    one = channel_errors(np.concatenate(list(a)), np.concatenate(list(b)), 1)
    np.testing.assert_allclose(acc.cosine, one.cosine)
    np.testing.assert_allclose(acc.snr_db, one.snr_db)
