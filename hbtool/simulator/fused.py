"""Single-pass integer loops for ``simulate``'s hot kernels, compiled by numba.

The kernels' numpy forms (:mod:`hbtool.kernels`) spell each step as a whole-array int64
operation: a requantization is four passes over the tensor, a LayerNorm about twenty. On
a memory-bound two-core machine those passes, not the products, dominated the emulator's
time. The loops here do the same integer arithmetic element by element, in one or two
passes, on narrow (int8/int16) tensors, rows split over the cores. They are the same
definitions in another spelling; ``tests/unit/simulator/test_simulate_cli_and_accelerated_kernels.py`` and the fuzzer check each one
bit for bit against the kernel's numpy form, rounding ties and saturation included.

Every function takes its output array (allocated by the caller in the narrowest dtype
that holds the clamp range) and integer parameters only; float appears only as the
exact-integer accumulators an ORT product returns (read with an exact ``int64`` cast).

Rounding modes are passed as small ints (:data:`MODE_CODES`). The jit machinery (numba's cache,
the threads rows split over, the background compiler) is :mod:`.jit`; this module holds the
loops alone, and its bytes key their on-disk cache.
"""

from __future__ import annotations

import numpy as np

from hbtool.simulator.jit import content_keyed_cache, jit, over_rows
from hbtool.simulator.jit import (  # noqa: F401  the loops' controls, used through this module
    background,
    call_skipped,
    compile_in_background,
    end_call,
    set_threads,
    skipped_calls,
    start_call,
    threads,
)

__all__ = ["MODE_CODES", "background", "call_skipped", "compile_in_background", "end_call", "set_threads", "skipped_calls",
           "start_call", "threads", "requantize_parts", "requantize_cols", "requantize_rows", "split_digits", "layernorm_rows",
           "requantize_cols_one", "requantize_rows_one", "softmax_rows", "add_rows", "mul_rows", "mul_rowscalar", "add_rowscalar", "mul_rowscalar_simple", "add_rowscalar_simple", "add_rows_simple",
           "mul_rows_simple", "lookup", "row_sums_requant", "digits_u8", "digits_i8", "quantize", "depthwise_rows", "depthwise_3x3", "columns_3x3_s2", "add_same_simple",
           "mul_same_simple", "dequantize"]

MODE_CODES = {"floor": 0, "half_up": 1, "half_away": 2, "half_even": 3}

content_keyed_cache(__file__)


@jit(inline="always")
def _rshift(x, n, mode):
    """``rounding_shift_numpy`` of one int64 by ``n >= 0`` (see :mod:`hbtool.kernels.fixedpoint`)."""
    if n == 0:
        return x
    if mode == 0:
        return x >> n
    half = np.int64(1) << (n - 1)
    if mode == 1:
        return (x + half) >> n
    if mode == 2:
        m = (abs(x) + half) >> n
        return -m if x < 0 else m
    q = x >> n
    r = x - (q << n)
    if r > half or (r == half and (q & 1) == 1):
        q += 1
    return q


@jit(inline="always")
def _clip(x, lo, hi):
    return lo if x < lo else (hi if x > hi else x)


@jit(inline="always")
def _requant_one(acc, m, n, clamp, pre, lo, hi, mode):
    """:meth:`Requantize.apply_trusted` of one accumulator."""
    if acc > clamp:
        acc = clamp
    elif acc < -clamp:
        acc = -clamp
    if pre:
        acc = _rshift(acc, pre, mode)
    return _clip(_rshift(acc * m, n - pre, mode), lo, hi)


@jit()
def _requantize_parts(r0_, r1_, parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out):
    """``out[r,q] = requant_c(bias[c] + sum_k factors[k] * parts[k][r,q])``.

    ``parts``: a tuple of 2-D arrays ``(R, Q)`` holding exact integers (the digit parts of a
    product, or one accumulator); per-channel parameters are ``[C]`` int64 arrays, channel
    ``c = q`` (``per_col``: channels last, as Linear) or ``c = r % C`` (rows of NCHW, as Conv).
    """
    R, Q = out.shape
    C = M.shape[0]
    K = len(parts)
    for r in range(r0_, r1_):
        cr = 0 if C == 1 else r % C
        for q in range(Q):
            c = (q if C > 1 else 0) if per_col else cr
            acc = bias[c]
            for k in range(K):
                acc += factors[k] * np.int64(parts[k][r, q])
            out[r, q] = _requant_one(acc, M[c], n[c], clamp[c], pre[c], lo, hi, mode)


@jit()
def _requantize_cols(r0_, r1_, y0, y1, A0, A1, folded, n, lo, hi, out):
    """The common case of :func:`requantize_parts`, written to vectorise: at most two parts
    (``A1 = 0`` for one), channels along columns, ``floor``/``half_up``, no accumulator clamp or
    pre-shift: ``((bias + f0 * y0 + f1 * y1) * M + half) >> n`` as ``(y0 * A0 + y1 * A1 + folded) >> n``
    with ``A_k = f_k * M`` read as int32 and ``folded = bias * M + half`` (the same int64 value,
    modulo ``2**64`` as the int64 arithmetic is; see :func:`_requantize_cols_one`: 32 x 32 -> 64-bit
    multiplies, which AVX2 has; measured there 0.47x the loop with 64-bit multiplies)."""
    R, Q = out.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            v = (np.int64(y0[r, q]) * np.int64(A0[q]) + np.int64(y1[r, q]) * np.int64(A1[q]) + folded[q]) >> n[q]
            out[r, q] = min(max(v, lo), hi)


@jit()
def _requantize_rows(r0_, r1_, y0, y1, A0, A1, folded, n, lo, hi, out):
    """:func:`requantize_cols` with the channel of row ``r`` being ``r % C`` (NCHW rows; C = 1: per tensor)."""
    R, Q = out.shape
    C = A0.shape[0]
    for r in range(r0_, r1_):
        c = r % C
        a0, a1, b, nn = np.int64(A0[c]), np.int64(A1[c]), folded[c], n[c]
        for q in range(Q):
            v = (np.int64(y0[r, q]) * a0 + np.int64(y1[r, q]) * a1 + b) >> nn
            out[r, q] = min(max(v, lo), hi)


@jit()
def _requantize_cols_one(r0_, r1_, y, folded, M32, n, lo, hi, out):
    """:func:`requantize_cols` of a product of one part (factor 1): the common case (an int8 GEMM, an
    unsplit float product) reads one accumulator tensor, not the same one twice with factor 0, and
    its loop vectorises; measured 2.5x faster than the two-part loop on a Swin-T Linear's output.

    ``((bias + y) * M + half) >> n`` as ``(y * M + folded) >> n`` with ``folded = bias * M + half``
    (:meth:`accel.RequantParams.folded`): the same int64 value (the identity holds modulo ``2**64``,
    so even where the int64 arithmetic wraps), and with ``M`` read from int32 (``M32``, where every
    multiplier fits) and ``y`` int32 the product is a 32 x 32 -> 64-bit multiply that AVX2 has
    (``vpmuldq``); a full 64-bit multiply is AVX-512 only (``vpmullq``), which AVX2 emulates in
    several instructions. Measured on an AVX2 EPYC, one thread, hot: 0.67x the old loop's time."""
    R, Q = out.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            v = (np.int64(y[r, q]) * np.int64(M32[q]) + folded[q]) >> n[q]
            out[r, q] = min(max(v, lo), hi)


@jit()
def _requantize_rows_one(r0_, r1_, y, folded, M32, n, lo, hi, out):
    """:func:`requantize_cols_one` with the channel of row ``r`` being ``r % C`` (NCHW rows; C = 1: per tensor)."""
    R, Q = out.shape
    C = M32.shape[0]
    for r in range(r0_, r1_):
        c = r % C
        m, b, nn = np.int64(M32[c]), folded[c], n[c]
        for q in range(Q):
            v = (np.int64(y[r, q]) * m + b) >> nn
            out[r, q] = min(max(v, lo), hi)


@jit()
def _split_digits(r0_, r1_, x, out):
    """``x = 256 * hi + lo`` with ``hi = (x + 128) >> 8``, ``lo`` in [-128, 127]: ``out[0] = hi``, ``out[1] = lo`` (float32).

    ``x`` and ``out[0]`` are 2-D ``(R, Q)``; the balanced digits keep ``|digit| <= 128``.
    """
    R, Q = x.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            v = np.int64(x[r, q])
            h = (v + 128) >> 8
            out[0, r, q] = h
            out[1, r, q] = v - (h << 8)


@jit()
def _layernorm_rows(r0_, r1_, q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out):
    """:meth:`LayerNorm.apply_numpy` on rows ``q[r, :]`` (three passes over each row, no temporaries)."""
    R, N = q.shape
    two_n = np.int64(2 * N)
    for r in range(r0_, r1_):
        S = np.int64(0)
        for j in range(N):
            S += np.int64(q[r, j]) << alpha[j]
        mu = ((S << (f + 1)) + N) // two_n
        V = np.int64(0)
        for j in range(N):
            d = ((np.int64(q[r, j]) << alpha[j]) << f) - mu
            if d_shift:
                d = _rshift(d, d_shift, mode)
            V += d * d
        w = V + E
        if w < 1:
            w = np.int64(1)
        t = w
        p = np.int64(1)
        for step in (16, 8, 4, 2, 1):
            if t < (np.int64(1) << (52 - 2 * step)):
                t = t << (2 * step)
                p = p << step
        s = np.int64(np.sqrt(np.float64(t)))  # exact floor sqrt after the fix-ups (t < 2**52)
        while s * s > t:
            s -= 1
        while (s + 1) * (s + 1) <= t:
            s += 1
        Rr = (np.int64(1) << 50) // s
        if mode <= 1 and d_shift == 0 and shift >= 0:
            # floor / half_up spelled out (the same shifts as _rshift): the branches of the generic
            # rounding leave this loop; measured 2.4x faster on DeiT-Tiny's LayerNorm rows
            h20 = np.int64(mode) << 19
            hs = np.int64(mode) << (shift - 1) if shift > 0 else np.int64(0)
            for j in range(N):
                d = ((np.int64(q[r, j]) << alpha[j]) << f) - mu
                u = (d * Rr * p + h20) >> 20
                out[r, j] = min(max((u * G[j] + B[j] + hs) >> shift, lo), hi)
            continue
        for j in range(N):
            d = ((np.int64(q[r, j]) << alpha[j]) << f) - mu
            if d_shift:
                d = _rshift(d, d_shift, mode)
            u = _rshift(d * Rr * p, 20, mode)
            out[r, j] = _clip(_rshift(u * G[j] + B[j], shift, mode), lo, hi)


@jit()
def _softmax_rows(r0_, r1_, q, exps, mask_min, qmin, p, ymax, thresholds, out):
    """:meth:`Softmax.apply_numpy` on rows ``q[r, :]``; ``thresholds`` non-empty means log2 codes.

    ``exps[u]`` is the exponential of every gap ``u = max - q`` (:meth:`Softmax.exp_of_gap` on all
    256 / 65536 of them, tabulated once per kernel): one gather per element, where the two-table
    product and its rounding shift took 2x the whole loop's time on DeiT-Tiny's attention.
    Each row's exponentials are computed once into a row buffer (the sum needs them all before
    the first quotient). The three passes (max, gather and sum, quotient) are branch-free, so each
    vectorises; the quotient is :func:`_floor_quotients` where that is exact, else the corrected
    reciprocal. The mask of ``qmin`` codes costs a select per element (the recogniser's 40 x 18,385 logits:
    636 against 389 us for the gather pass), so a row without that code, found in the max pass, skips it.
    The row buffer holds the exponentials as int64: the gather pass stays scalar, and a float64 conversion
    there cost more than in the quotient pass, where it vectorises (Swin-T's 12 Softmax 2.69 -> 2.44 ms)."""
    R, N = q.shape
    L = len(thresholds)
    e = np.empty(N, np.int64)  # exponentials (< 2**31): int64, converted in the vectorised quotient pass
    exact_below = np.int64(1) << max(np.int64(53) - p, np.int64(0))
    for r in range(r0_, r1_):
        qr = q[r]
        orow = out[r]
        m = qr[0]
        lo = qr[0]
        for j in range(1, N):
            m = max(m, qr[j])
            lo = min(lo, qr[j])
        mm = np.int64(m)
        total = np.int64(0)
        if mask_min and np.int64(lo) == qmin:  # no code at qmin: the mask changes nothing, the plain gather runs
            for j in range(N):
                x = np.int64(qr[j])
                u = mm - x
                v = np.int64(exps[np.uint64(u)])  # u >= 0: an unsigned index carries no wraparound check
                v = np.int64(0) if (x == qmin) & (u > 0) else v
                e[j] = v
                total += v
        else:
            for j in range(N):
                v = np.int64(exps[np.uint64(mm - np.int64(qr[j]))])
                e[j] = v
                total += v
        half_total = total >> 1
        if L == 0 and total < exact_below:
            _floor_quotients(e, p, half_total, total, ymax, orow)
            continue
        inv = 1.0 / np.float64(total)
        for j in range(N):
            num = (e[j] << p) + half_total
            # floor(num / total) by the reciprocal: num < 2**53 and the quotient < 2**23, so the
            # float estimate is within 1 of it; one integer check each way makes it exact
            y = np.int64(np.float64(num) * inv)
            if y * total > num:
                y -= 1
            elif (y + 1) * total <= num:
                y += 1
            if L:
                k = 0
                for i in range(L):
                    if y < thresholds[i]:
                        k += 1
                orow[j] = k
            else:
                orow[j] = _clip(y, 0, ymax)


@jit(inline="always")
def _floor_quotients(e, p, half_total, total, ymax, orow):
    """``orow[j] = min((e[j] << p + half_total) // total, ymax)`` as ``floor`` of one float64 division.

    Exact, not approximate, while ``total < 2**(53 - p)`` (the caller's test): ``num = e * 2**p +
    half_total`` is an integer below ``2**53`` (the kernel checks that bound), so float64 holds it and
    ``total``; IEEE division rounds the true quotient ``Q`` to the nearest double. ``Q <= 2**p + 1/2``
    (``e <= total``), so doubles near it are ``2**(p - 52)`` apart or closer, and rounding moves ``Q``
    by at most ``2**(p - 53)``. Where ``Q`` is not an integer it lies at least ``1 / total >
    2**(p - 53)`` below the next integer, so the rounded value stays below it and ``floor`` gives
    ``floor(Q)``; an integer ``Q`` is exact. No integer multiply-back and no branch per element."""
    tf = np.float64(total)
    half = np.float64(half_total)
    scale = np.float64(np.int64(1) << p)
    top = np.float64(ymax)
    for j in range(len(orow)):
        orow[j] = min(np.floor((np.float64(e[j]) * scale + half) / tf), top)


@jit()
def _add_rows(r0_, r1_, a, b, A, B, n, lo, hi, mode, out):
    """:meth:`Add.apply_numpy` with ``b``'s rows repeating over ``a``'s (``R % Rb == 0``); ``B`` carries the sign."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        rb = r % Rb
        for c in range(C):
            acc = np.int64(a[r, c]) * A[c] + B[c] * np.int64(b[rb, c])
            out[r, c] = _clip(_rshift(acc, n[c], mode), lo, hi)


@jit()
def _mul_rows(r0_, r1_, a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:meth:`Mul.apply_numpy` (scalar requantizer) with ``b``'s rows repeating over ``a``'s."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        rb = r % Rb
        for c in range(C):
            out[r, c] = _requant_one(np.int64(a[r, c]) * np.int64(b[rb, c]), m, n, clamp, pre, lo, hi, mode)


@jit()
def _mul_rowscalar(r0_, r1_, a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:meth:`Mul.apply_numpy` with one ``b`` value per row of ``a`` (a channel scale over the spatial axes),
    ``b`` repeating over ``a``'s rows (``R % b.size == 0``)."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bv = np.int64(b[r % Rb])
        for q in range(Q):
            out[r, q] = _requant_one(np.int64(a[r, q]) * bv, m, n, clamp, pre, lo, hi, mode)


@jit()
def _add_rowscalar(r0_, r1_, a, b, A, B, n, lo, hi, mode, out):
    """:meth:`Add.apply_numpy` (scalar ``A``, ``B``, ``n``) with one ``b`` value per row of ``a``, repeating as in
    :func:`_mul_rowscalar`."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bb = B * np.int64(b[r % Rb])
        for q in range(Q):
            out[r, q] = _clip(_rshift(np.int64(a[r, q]) * A + bb, n, mode), lo, hi)


@jit()
def _add_rows_simple(r0_, r1_, a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_rows` for ``floor``/``half_up`` (``half[c]`` = 0 or ``2**(n[c]-1)``), written to vectorise."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        ar = a[r]
        br = b[r % Rb]
        orow = out[r]
        for c in range(C):
            v = (np.int64(ar[c]) * A[c] + B[c] * np.int64(br[c]) + half[c]) >> n[c]
            orow[c] = min(max(v, lo), hi)


@jit()
def _mul_rows_simple(r0_, r1_, a, b, m, n, half, lo, hi, out):
    """:func:`_mul_rows` for ``floor``/``half_up`` (``half`` = 0 or ``2**(n-1)``), no accumulator clamp or
    pre-shift, written to vectorise."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        ar = a[r]
        br = b[r % Rb]
        orow = out[r]
        for c in range(C):
            v = (np.int64(ar[c]) * np.int64(br[c]) * m + half) >> n
            orow[c] = min(max(v, lo), hi)


@jit()
def _mul_rowscalar_simple(r0_, r1_, a, b, m, n, half, lo, hi, out):
    """:func:`_mul_rowscalar` for ``floor``/``half_up`` (``half`` = 0 or ``2**(n-1)``), no accumulator clamp
    or pre-shift, written to vectorise (no per-element branch on the mode; measured 2x faster).
    ``a * (b * m)`` equals ``(a * b) * m`` in int64 bit for bit (products modulo 2**64 associate)."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bm = np.int64(b[r % Rb]) * m
        ar = a[r]
        orow = out[r]
        for q in range(Q):
            v = (np.int64(ar[q]) * bm + half) >> n
            orow[q] = min(max(v, lo), hi)


@jit()
def _add_rowscalar_simple(r0_, r1_, a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_rowscalar` for ``floor``/``half_up`` (``half`` = 0 or ``2**(n-1)``), written to vectorise."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bb = B * np.int64(b[r % Rb]) + half
        ar = a[r]
        orow = out[r]
        for q in range(Q):
            v = (np.int64(ar[q]) * A + bb) >> n
            orow[q] = min(max(v, lo), hi)


@jit()
def _add_same_simple(r0_, r1_, a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_rows_simple` of two operands of one shape with per-tensor ``A``, ``B`` (signed), ``n``,
    ``half``, on flat (1-D) arrays: the row form's rows are the last axis, 7 to 56 elements on a
    CNN's planes, too short to vectorise and each element reading three per-channel arrays."""
    as_ = a[r0_:r1_]
    bs = b[r0_:r1_]
    os_ = out[r0_:r1_]
    for i in range(os_.shape[0]):
        v = (np.int64(as_[i]) * A + B * np.int64(bs[i]) + half) >> n
        os_[i] = min(max(v, lo), hi)


@jit()
def _scalar_affine_pair(r0_, r1_, x, f1, g1, u1, c1, h1, n1, lo1, hi1, f2, g2, u2, c2, h2, n2, lo2, hi2, out):
    """Two elementwise steps by a constant scalar (a Mul, then an Add: a learnable affine block) in one pass.

    Stage ``k`` is ``clamp((v * (f_k * g_k) + (u_k * c_k + h_k)) >> n_k, lo_k, hi_k)`` in int64 (products
    wrap as in the one-step loops): a Mul by ``c`` is ``f = c, g = M, u = 0, h = half`` as in
    :func:`_mul_rowscalar_simple`, an Add ``f = A, g = 1, u = B, h = half`` as in
    :func:`_add_rowscalar_simple`, the same int64 expressions. The first stage's result stays in a
    register instead of a tensor another pass reads back (it is clamped to its 8/16-bit range, so the
    int16 it would be stored as holds it)."""
    m1 = f1 * g1
    a1 = u1 * c1 + h1
    m2 = f2 * g2
    a2 = u2 * c2 + h2
    xs = x[r0_:r1_]
    os_ = out[r0_:r1_]
    for i in range(os_.shape[0]):
        v = min(max((np.int64(xs[i]) * m1 + a1) >> n1, lo1), hi1)
        os_[i] = min(max((v * m2 + a2) >> n2, lo2), hi2)


@jit()
def _mul_same_simple(r0_, r1_, a, b, m, n, half, lo, hi, out):
    """:func:`_mul_rows_simple` of two operands of one shape on flat (1-D) arrays (see :func:`_add_same_simple`)."""
    as_ = a[r0_:r1_]
    bs = b[r0_:r1_]
    os_ = out[r0_:r1_]
    for i in range(os_.shape[0]):
        v = (np.int64(as_[i]) * np.int64(bs[i]) * m + half) >> n
        os_[i] = min(max(v, lo), hi)


@jit()
def _lookup(r0_, r1_, x, table, offset, out):
    """``out[i] = table[x[i] + offset]`` (a whole-code-range table of an elementwise kernel).

    Indexed through slices from 0 and the table by an unsigned code: a signed index could be
    negative as far as numba knows, and its wraparound check per element made the loop 2-3x slower.
    Four elements a turn, their loads before their stores: the gather does not vectorise, and the
    unrolled form overlaps the independent loads (0.90-0.93x the one-at-a-time loop on 245,760 and
    1,204,224 int16 codes, one thread, hot)."""
    xs = x[r0_:r1_]
    os_ = out[r0_:r1_]
    n = xs.shape[0]
    n4 = n - n % 4
    for i in range(0, n4, 4):
        v0 = table[np.uint64(np.int64(xs[i]) + offset)]
        v1 = table[np.uint64(np.int64(xs[i + 1]) + offset)]
        v2 = table[np.uint64(np.int64(xs[i + 2]) + offset)]
        v3 = table[np.uint64(np.int64(xs[i + 3]) + offset)]
        os_[i] = v0
        os_[i + 1] = v1
        os_[i + 2] = v2
        os_[i + 3] = v3
    for i in range(n4, n):
        os_[i] = table[np.uint64(np.int64(xs[i]) + offset)]


@jit()
def _dequantize(r0_, r1_, q, scale, out):
    """:meth:`Dequantize.apply_numpy` by one float32 ``scale``: ``float32(q) * scale`` element by element, the
    same IEEE conversion (exact for int16 codes) and float32 product as numpy's cast and multiply, in one
    pass instead of two (the recogniser's 40 x 18,385 output)."""
    qs = q[r0_:r1_]
    os_ = out[r0_:r1_]
    for i in range(os_.shape[0]):
        os_[i] = np.float32(qs[i]) * scale


@jit()
def _quantize(r0_, r1_, x, scale, qmin, qmax, out):
    """:meth:`Quantize.apply_numpy` of float32 ``x`` by one float32 ``scale``: ``clip(rint(x / scale))``,
    NaN to 0, element by element (the same IEEE float32 division and round-half-even as numpy's
    whole-array passes, in one pass).

    Selects, not branches, so the loop vectorises: NaN to 0, then the clamp on the float32 value (``qmin``
    and ``qmax`` of at most 16 bits are exact in float32, and so is every rounded value between them), one
    conversion. MobileNetV2's 3 x 224 x 224 input 52.6 -> 19.9 us of CPU, one thread, hot (the branching
    spelling kept it scalar)."""
    xs = x[r0_:r1_]
    os_ = out[r0_:r1_]
    lo = np.float32(qmin)
    hi = np.float32(qmax)
    for i in range(xs.shape[0]):
        v = np.rint(xs[i] / scale)
        v = np.float32(0) if v != v else v
        v = lo if v < lo else v
        v = hi if v > hi else v
        os_[i] = np.int32(v)


@jit()
def _row_sums_requant(r0_, r1_, x, M, n, clamp, pre, lo, hi, mode, out):
    """``out[r] = requant(sum(x[r, :]))`` by one per-tensor requantizer (:func:`_requant_one`): a ReduceMean /
    ReduceSum over the trailing axes, the rows' int64 sums and their requantization in one pass. The numpy
    form (a range check, an int64 sum over the axes, four requantizing passes) took 68 us of CPU on
    MobileNetV2's 1280 x 7 x 7 global pool, one thread, hot; this loop 5-10 us."""
    R, Q = x.shape
    for r in range(r0_, r1_):
        xr = x[r]
        total = np.int64(0)
        for q in range(Q):
            total += np.int64(xr[q])
        out[r] = _requant_one(total, M, n, clamp, pre, lo, hi, mode)


@jit()
def _digits_u8(r0_, r1_, x, hi, lo):
    """Base-256 digits of a flat int16 ``x`` as uint8 with zero point 128: ``hi = (x >> 8) + 128`` (the signed
    high digit) and ``lo = x & 255`` (the low digit, read as ``lo - 128``).

    Flat, not by rows: a CNN's rows are 7-112 elements, too short to vectorise. Measured hot, one thread,
    against the row loop before it: MobileNetV2's int16 pointwise inputs 32 x 112 x 112 26 -> 21 us,
    96 x 56 x 56 48 -> 18 us, 384 x 14 x 14 48 -> 5 us; DeiT-Tiny's 396 x 192 rows 4.5 -> 5.2 us."""
    xs = x[r0_:r1_]
    hs = hi[r0_:r1_]
    ls = lo[r0_:r1_]
    for i in range(xs.shape[0]):
        v = xs[i]
        hs[i] = np.uint8((v >> 8) ^ 128)
        ls[i] = np.uint8(v & 255)


@jit()
def _digits_i8(r0_, r1_, x, hi, lo):
    """:func:`_digits_u8` as int8 (its bytes with the top bit flipped): ``hi = x >> 8``, ``lo = (x & 255) - 128``.

    The int16 pointwise convolutions took the uint8 digits by rows and flipped the top bits in a numpy
    pass over both planes; this one flat pass measured (hot, one thread) 40 -> 21 us on MobileNetV2's
    32 x 112 x 112 input, 59 -> 17 us on 96 x 56 x 56, 52 -> 5 us on 384 x 14 x 14."""
    xs = x[r0_:r1_]
    hs = hi[r0_:r1_]
    ls = lo[r0_:r1_]
    for i in range(xs.shape[0]):
        v = xs[i]
        hs[i] = np.int8(v >> 8)
        ls[i] = np.int8((v & 255) ^ 128)


@jit()
def _depthwise_rows(r0_, r1_, x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, geometry, out):
    """A depthwise convolution at stride 1 and its requantization in one pass, no accumulator tensor.

    ``x (N*C, H, W)`` int8/int16 codes, ``w (Cout, KH, KW)`` float32 or float64 holding the
    integer weights (the type the sums are exact in, chosen by the caller: float32 while
    ``2**(in_bits-1) * sum|w| <= 2**24``), ``out (N*Cout, OH, OW)``; row ``r`` is output channel
    ``r % Cout`` of sample ``r // Cout``. ``geometry``: int64 ``[sh, sw, ph, pw, dh, dw, ph_end,
    pw_end]`` (zero padding, as the kernel's numpy form; strides 1 here, strided layers run
    :func:`_depthwise_rows_phased`).

    Each input plane is copied once into a zero-padded scratch plane of width ``Wp``. The
    accumulator is the whole output plane laid out at that width (the columns past the last
    output are computed and never read), so each kernel tap is one multiply-add over one
    contiguous run, the loop that vectorises however narrow the plane. Float, not int32, sums:
    numba widens int32 arithmetic to int64, which halves the lanes; every partial sum is an
    integer the float type holds exactly, in any order. The requantization is ``simple``'s form
    (:func:`_requant_row`: float64 where exact, else int64 spelled out as in :func:`_requantize_rows_one`
    for floor / half_up without clamp or pre-shift, else :func:`_requant_one`).
    """
    R, OH, OW = out.shape
    Cout, KH, KW = w.shape
    H, W = x.shape[1], x.shape[2]
    C = x.shape[0] // (R // Cout)
    mult = Cout // C
    ph, pw, dh, dw = geometry[2], geometry[3], geometry[4], geometry[5]
    Hp = H + ph + geometry[6]
    Wp = W + pw + geometry[7]
    xp = np.zeros(Hp * Wp + (KW - 1) * dw + 1, w.dtype)
    L = OH * Wp
    acc = np.empty(L, w.dtype)
    for r in range(r0_, r1_):
        c = r % Cout
        ri = (r // Cout) * C + c // mult
        if r == r0_ or c % mult == 0:  # a new input plane: copy it inside the zero border
            for iy in range(H):
                row = xp[(iy + ph) * Wp + pw:(iy + ph) * Wp + pw + W]
                xr = x[ri, iy]
                for ix in range(W):
                    row[ix] = xr[ix]
        b, m, nn, h, cl, pr = bias[c], M[c], n[c], half[c], clamp[c], pre[c]
        if KH == 3 and KW == 3:
            _taps_3x3(acc, xp, w[c], 0, dh * Wp, 2 * dh * Wp, dw, L)
        else:
            acc[:] = 0
            for ky in range(KH):
                for kx in range(KW):
                    wv = w[c, ky, kx]
                    o = ky * dh * Wp + kx * dw
                    xs = xp[o:o + L]
                    for p in range(L):
                        acc[p] += wv * xs[p]
        for oy in range(OH):
            _requant_row(acc[oy * Wp:oy * Wp + OW], out[r, oy], b, m, nn, h, cl, pr, lo, hi, mode, simple)


@jit()
def _depthwise_rows_phased(r0_, r1_, x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, geometry, out):
    """The strided form of :func:`_depthwise_rows` (the same arguments and exactness, any strides).
    :func:`depthwise_rows` still runs stride-1 layers through :func:`_depthwise_rows`: its one plane
    and fixed offsets were faster on small planes (192 x 28 x 28: 0.15-0.19 ms against 0.23-0.25 ms
    through this loop, one thread, best of 40).

    Each input plane is copied once into zero-padded scratch rows split by row phase: padded row
    ``i * sh + py`` goes to phase plane ``py`` as its row ``i`` (contiguous copies of whole rows).
    Tap ``(ky, kx)`` of output row ``oy`` reads padded row ``oy * sh + ky * dh``: phase plane
    ``ky * dh % sh`` at row ``oy + ky * dh // sh``. So at any row stride the accumulator is the
    whole output plane laid out at the padded width, columns at stride 1, and each tap is one
    multiply-add over one contiguous run, as at stride 1; the requantization reads every
    ``sw``-th sum (the columns between outputs are computed and never read: cheaper than
    deinterleaving the columns when the plane is copied, which was measured too). The strided
    layers used to run one output row at a time (short runs, a zeroing and a loop set-up per row):
    MobileNetV2's 144 x 56 x 56 stride-2 layer now takes about 0.65x that, 96 x 112 x 112 0.85x.
    """
    R, OH, OW = out.shape
    Cout, KH, KW = w.shape
    H, W = x.shape[1], x.shape[2]
    C = x.shape[0] // (R // Cout)
    mult = Cout // C
    sh, sw, ph, pw, dh, dw = geometry[0], geometry[1], geometry[2], geometry[3], geometry[4], geometry[5]
    Hq = (H + ph + geometry[6] + sh - 1) // sh
    Wp = W + pw + geometry[7]
    PL = Hq * Wp + (KW - 1) * dw + 1  # one row-phase plane and the run past its end the last tap reads
    xp = np.zeros(sh * PL, w.dtype)
    L = OH * Wp
    acc = np.empty(L, w.dtype)
    for r in range(r0_, r1_):
        c = r % Cout
        ri = (r // Cout) * C + c // mult
        if r == r0_ or c % mult == 0:  # a new input plane: copy its rows inside the zero border, phase by phase
            for iy in range(H):
                start = ((iy + ph) % sh) * PL + ((iy + ph) // sh) * Wp + pw
                row = xp[start:start + W]
                xr = x[ri, iy]
                for ix in range(W):
                    row[ix] = xr[ix]
        b, m, nn, h, cl, pr = bias[c], M[c], n[c], half[c], clamp[c], pre[c]
        if KH == 3 and KW == 3:
            _taps_3x3(acc, xp, w[c], 0, (dh % sh) * PL + (dh // sh) * Wp, (2 * dh % sh) * PL + (2 * dh // sh) * Wp, dw, L)
        else:
            acc[:] = 0
            for ky in range(KH):
                o0 = (ky * dh % sh) * PL + (ky * dh // sh) * Wp
                for kx in range(KW):
                    wv = w[c, ky, kx]
                    xs = xp[o0 + kx * dw:o0 + kx * dw + L]
                    for p in range(L):
                        acc[p] += wv * xs[p]
        if sw == 1:
            for oy in range(OH):
                _requant_row(acc[oy * Wp:oy * Wp + OW], out[r, oy], b, m, nn, h, cl, pr, lo, hi, mode, simple)
        else:
            for oy in range(OH):
                _requant_row(acc[oy * Wp:oy * Wp + (OW - 1) * sw + 1:sw], out[r, oy], b, m, nn, h, cl, pr, lo, hi, mode, simple)


@jit(inline="always")
def _taps_3x3(acc, xp, wc, r0, r1, r2, dw, L):
    """``acc[p] = sum of the nine taps`` of a 3 x 3 kernel ``wc``, kernel row ``ky`` reading ``xp`` from
    offset ``r_ky`` (columns ``dw`` apart): one pass that loads nine inputs and stores each sum once,
    where the tap-by-tap loop loads and stores the whole accumulator nine times (for a 112 x 112
    plane, 51 KB: more than L1). Exact integers in the float type, so the order of the sum is free."""
    # nine slices indexed from 0: an index like ``p + dw`` keeps numba's wraparound check per element,
    # which stops vectorisation
    x00, x01, x02 = xp[r0:r0 + L], xp[r0 + dw:r0 + dw + L], xp[r0 + 2 * dw:r0 + 2 * dw + L]
    x10, x11, x12 = xp[r1:r1 + L], xp[r1 + dw:r1 + dw + L], xp[r1 + 2 * dw:r1 + 2 * dw + L]
    x20, x21, x22 = xp[r2:r2 + L], xp[r2 + dw:r2 + dw + L], xp[r2 + 2 * dw:r2 + 2 * dw + L]
    w00, w01, w02 = wc[0, 0], wc[0, 1], wc[0, 2]
    w10, w11, w12 = wc[1, 0], wc[1, 1], wc[1, 2]
    w20, w21, w22 = wc[2, 0], wc[2, 1], wc[2, 2]
    # one pass per kernel row: with all nine inputs in one loop LLVM's runtime alias checks (ten
    # arrays) exceed its limit and the loop stays scalar
    for p in range(L):
        acc[p] = w00 * x00[p] + w01 * x01[p] + w02 * x02[p]
    for p in range(L):
        acc[p] += w10 * x10[p] + w11 * x11[p] + w12 * x12[p]
    for p in range(L):
        acc[p] += w20 * x20[p] + w21 * x21[p] + w22 * x22[p]


# ``simple`` forms of the depthwise loops' requantization (:func:`_requant_row`)
REQUANT_GENERIC, REQUANT_INT64, REQUANT_FLOAT64 = 0, 1, 2


@jit(inline="always")
def _requant_row(src, dst, b, m, nn, h, cl, pr, lo, hi, mode, simple):
    """``dst[i] = requant(b + src[i])`` of one row of exact float sums (see :func:`_depthwise_rows`).

    ``simple``: :data:`REQUANT_GENERIC` (any rounding, clamp and pre-shift: :func:`_requant_one`),
    :data:`REQUANT_INT64` (floor / half_up, spelled out in int64) or :data:`REQUANT_FLOAT64`: the same
    ``floor(((b + s) * m + h) / 2**nn)`` in float64, where the caller has checked that every value of it
    stays below ``2**53`` (integers, exact; the scaling by ``2**-nn`` is exact and ``>>`` is floor
    division). AVX2 has no vector conversion of floats to int64 nor a 64-bit multiply, so the int64 form
    runs about scalar there; the float64 one vectorises (one 112 x 112 plane: 5.2 us against 14.7 us, hot)."""
    if simple == 2:
        bf, mf, hf = np.float64(b), np.float64(m), np.float64(h)
        scale = 1.0 / np.float64(np.int64(1) << nn)
        lof, hif = np.float64(lo), np.float64(hi)
        for i in range(dst.shape[0]):
            v = np.floor(((bf + np.float64(src[i])) * mf + hf) * scale)
            dst[i] = min(max(v, lof), hif)
    elif simple == 1:
        for i in range(dst.shape[0]):
            v = ((b + np.int64(src[i])) * m + h) >> nn
            dst[i] = min(max(v, lo), hi)
    else:
        for i in range(dst.shape[0]):
            dst[i] = _requant_one(b + np.int64(src[i]), m, nn, cl, pr, lo, hi, mode)


@jit()
def _depthwise_3x3_flat(r0_, r1_, x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, out):
    """A 3 x 3 depthwise convolution at stride 1 with one zero of padding on every side, one output channel per
    input channel, and its requantization: ``x (N*C, H, W)`` int8/int16 codes, ``w (C, 3, 3)`` float32 or float64
    holding the integer weights (the type the sums are exact in, as for :func:`_depthwise_rows`), ``out
    (N*C, H*W)``; row ``r`` is channel ``r % C``. ``simple``: the form of :func:`_requant_row`.

    The plane is copied once, flat, between ``W + 1`` zeros on either side, so output ``p = oy * W + ox`` reads tap
    ``(ky, kx)`` at ``p + ky * W + kx`` of the scratch: every tap is one contiguous run over the whole plane and the
    sums come out at the plane's own width. The rows above and below are the zeros; a tap of the left (right)
    kernel column at ``ox = 0`` (``W - 1``) reads the neighbouring row's last (first) code, so those two columns
    of taps are multiplied by a 0 / 1 mask. Against :func:`_depthwise_rows` (a scratch plane of width ``W + 2``,
    whose two extra columns of sums are computed and dropped, and a requantizing call per output row), the
    copy, the sums and the requantization each run once over the plane: the short rows of 14 x 14 and 7 x 7
    planes cost no per-row set-up. Sums in the float type, exact in any order."""
    R, L = out.shape
    C = w.shape[0]
    W = x.shape[2]
    xp = np.zeros(L + 2 * W + 2, w.dtype)
    acc = np.empty(L, w.dtype)
    mask_l = np.ones(L, w.dtype)
    mask_r = np.ones(L, w.dtype)
    for p in range(0, L, W):
        mask_l[p] = 0
        mask_r[p + W - 1] = 0
    body = xp[W + 1:W + 1 + L]
    # the nine taps as runs indexed from 0 (an offset index keeps numba's wraparound check, which stops vectorising)
    l0, c0, q0 = xp[0:L], xp[1:1 + L], xp[2:2 + L]
    l1, c1, q1 = xp[W:W + L], xp[W + 1:W + 1 + L], xp[W + 2:W + 2 + L]
    l2, c2, q2 = xp[2 * W:2 * W + L], xp[2 * W + 1:2 * W + 1 + L], xp[2 * W + 2:2 * W + 2 + L]
    for r in range(r0_, r1_):
        c = r % C
        xf = x[r].ravel()
        for p in range(L):
            body[p] = xf[p]
        wc = w[c]
        w00, w01, w02 = wc[0, 0], wc[0, 1], wc[0, 2]
        w10, w11, w12 = wc[1, 0], wc[1, 1], wc[1, 2]
        w20, w21, w22 = wc[2, 0], wc[2, 1], wc[2, 2]
        # two passes: with every run in one loop LLVM's runtime alias checks exceed its limit and it stays scalar
        for p in range(L):
            acc[p] = w01 * c0[p] + w11 * c1[p] + w21 * c2[p]
        for p in range(L):
            acc[p] += (w00 * l0[p] + w10 * l1[p] + w20 * l2[p]) * mask_l[p] + (w02 * q0[p] + w12 * q1[p] + w22 * q2[p]) * mask_r[p]
        _requant_row(acc, out[r], bias[c], M[c], n[c], half[c], clamp[c], pre[c], lo, hi, mode, simple)


@jit()
def _depthwise_3x3_phases(r0_, r1_, x2, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, before, out):
    """:func:`_depthwise_3x3_flat` at stride 2 on planes of even height and width, padded by ``before`` (0 or 1) zeros
    above and to the left and one below and to the right (at ``before = 1`` the latter is never read):
    ``x2 (N*C, H, W / 2)`` the int8 codes read as int16 pairs (the low byte the even column), ``out (N*C, OH*OW)``
    with ``OH, OW = H / 2, W / 2``.

    The plane is split once into its four phases (row parity x column parity), each an ``OH x OW`` plane laid flat
    between ``OW + 1`` zeros. Output ``(oy, ox)`` reads input ``(2 oy + t, 2 ox + u)`` with ``t = ky - before``:
    phase ``(t mod 2, u mod 2)`` at ``p + (t // 2) * OW + u // 2`` (``p = oy * OW + ox``), a row above or below
    landing in the zeros and the kernel column whose ``u // 2`` is not 0 masked at its edge column. So every tap
    is one contiguous run over the output plane and only the outputs are summed, where
    :func:`_depthwise_rows_phased` sums every column and keeps every second. The int16 pair of a row holds both
    column phases, split with a cast and a shift (contiguous loads, no strided gather)."""
    R, L = out.shape
    C = w.shape[0]
    H, OW = x2.shape[1], x2.shape[2]
    G = OW + 1
    planes = np.zeros((4, L + 2 * G), w.dtype)
    acc = np.empty(L, w.dtype)
    edge = np.ones(L, w.dtype)  # the mask of the kernel column that reads across the plane's edge
    for p in range(0, L, OW):
        edge[p if before == 1 else p + OW - 1] = 0
    ee, eo, oe, oo = planes[0, G:G + L], planes[1, G:G + L], planes[2, G:G + L], planes[3, G:G + L]
    # run (ky, kx): the phase and shift of input (2 oy + ky - before, 2 ox + kx - before)
    runs = []
    for ky in range(3):
        for kx in range(3):
            t, u = ky - before, kx - before
            o = G + (t >> 1) * OW + (u >> 1)
            runs.append(planes[(t & 1) * 2 + (u & 1), o:o + L])
    medge = 0 if before == 1 else 2  # the masked kernel column
    ma, mb = (1, 2) if before == 1 else (0, 1)
    a0, a1, a2 = runs[ma], runs[3 + ma], runs[6 + ma]
    b0, b1, b2 = runs[mb], runs[3 + mb], runs[6 + mb]
    e0, e1, e2 = runs[medge], runs[3 + medge], runs[6 + medge]
    for r in range(r0_, r1_):
        c = r % C
        for oy in range(H // 2):
            xe, xo = x2[r, 2 * oy], x2[r, 2 * oy + 1]
            o = oy * OW
            d0, d1, d2, d3 = ee[o:o + OW], eo[o:o + OW], oe[o:o + OW], oo[o:o + OW]
            for j in range(OW):
                ve = np.int32(xe[j])
                vo = np.int32(xo[j])
                d0[j] = np.int8(ve)
                d1[j] = ve >> 8
                d2[j] = np.int8(vo)
                d3[j] = vo >> 8
        wc = w[c]
        wa0, wa1, wa2 = wc[0, ma], wc[1, ma], wc[2, ma]
        wb0, wb1, wb2 = wc[0, mb], wc[1, mb], wc[2, mb]
        we0, we1, we2 = wc[0, medge], wc[1, medge], wc[2, medge]
        for p in range(L):
            acc[p] = wa0 * a0[p] + wa1 * a1[p] + wa2 * a2[p]
        for p in range(L):
            acc[p] += wb0 * b0[p] + wb1 * b1[p] + wb2 * b2[p] + (we0 * e0[p] + we1 * e1[p] + we2 * e2[p]) * edge[p]
        _requant_row(acc, out[r], bias[c], M[c], n[c], half[c], clamp[c], pre[c], lo, hi, mode, simple)


@jit()
def _columns_3x3_s2(r0_, r1_, x2, before, out):
    """The int8 columns of a 3 x 3 convolution at stride 2 (:func:`.accel.columns`) on planes of even height and
    width padded by ``before`` (0 or 1) zeros above and to the left and one below and to the right: ``x2 (N*C, H,
    W / 2)`` the int8 codes read as int16 pairs (the low byte the even column), ``out (N*C, 9, OH*OW)``, row ``ky * 3
    + kx`` of plane ``r`` holding input ``(2 oy + ky - before, 2 ox + kx - before)`` at column ``oy * OW + ox``.

    An input row's two column phases are its pairs' low and high bytes (a cast and a shift of contiguous int16
    loads), and the third kernel column is one of them shifted by one output column. numpy's strided copy of the
    window view moves these 3-channel planes a byte at a time: MobileNetV2's stem (3 x 224 x 224) 117 us against
    19 us here (one thread, hot)."""
    R, H, OW = x2.shape
    for r in range(r0_, r1_):
        for oy in range(H // 2):
            o = oy * OW
            for ky in range(3):
                iy = 2 * oy + ky - before
                d0, d1, d2 = out[r, ky * 3, o:o + OW], out[r, ky * 3 + 1, o:o + OW], out[r, ky * 3 + 2, o:o + OW]
                if iy < 0 or iy >= H:
                    d0[:] = 0
                    d1[:] = 0
                    d2[:] = 0
                    continue
                xr = x2[r, iy]
                if before == 1:  # kernel column 0: the odd column at ox - 1; 1: the even at ox; 2: the odd at ox
                    for j in range(OW):
                        v = np.int32(xr[j])
                        d1[j] = np.int8(v)
                        d2[j] = np.int8(v >> 8)
                    d0[0] = 0
                    for j in range(OW - 1):
                        d0[j + 1] = d2[j]
                else:  # 0: the even column at ox; 1: the odd at ox; 2: the even at ox + 1
                    for j in range(OW):
                        v = np.int32(xr[j])
                        d0[j] = np.int8(v)
                        d1[j] = np.int8(v >> 8)
                    for j in range(OW - 1):
                        d2[j] = d0[j + 1]
                    d2[OW - 1] = 0


# ------------------------------------------------------------------------------ entry points (rows over the cores)
def requantize_parts(parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out):
    """:func:`_requantize_parts` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_parts, out.shape[0], out.size, parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out)


def requantize_cols(y0, y1, A0, A1, folded, n, lo, hi, out):
    """:func:`_requantize_cols` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_cols, out.shape[0], out.size, y0, y1, A0, A1, folded, n, lo, hi, out)


def requantize_rows(y0, y1, A0, A1, folded, n, lo, hi, out):
    """:func:`_requantize_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_rows, out.shape[0], out.size, y0, y1, A0, A1, folded, n, lo, hi, out)


def requantize_cols_one(y, folded, M32, n, lo, hi, out):
    """:func:`_requantize_cols_one` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_cols_one, out.shape[0], out.size, y, folded, M32, n, lo, hi, out)


def requantize_rows_one(y, folded, M32, n, lo, hi, out):
    """:func:`_requantize_rows_one` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_rows_one, out.shape[0], out.size, y, folded, M32, n, lo, hi, out)


def split_digits(x, out):
    """:func:`_split_digits` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_split_digits, x.shape[0], x.size, x, out)


def layernorm_rows(q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out):
    """:func:`_layernorm_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_layernorm_rows, q.shape[0], 8 * q.size, q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out)


def softmax_rows(q, exps, mask_min, qmin, p, ymax, thresholds, out):
    """:func:`_softmax_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_softmax_rows, q.shape[0], 8 * q.size, q, exps, mask_min, qmin, p, ymax, thresholds, out)


def add_rows(a, b, A, B, n, lo, hi, mode, out):
    """:func:`_add_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rows, out.shape[0], out.size, a, b, A, B, n, lo, hi, mode, out)


def mul_rows(a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:func:`_mul_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rows, out.shape[0], out.size, a, b, m, n, clamp, pre, lo, hi, mode, out)


def mul_rowscalar(a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:func:`_mul_rowscalar` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rowscalar, out.shape[0], out.size, a, b, m, n, clamp, pre, lo, hi, mode, out)


def add_rows_simple(a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_rows_simple` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rows_simple, out.shape[0], out.size, a, b, A, B, n, half, lo, hi, out)


def mul_rows_simple(a, b, m, n, half, lo, hi, out):
    """:func:`_mul_rows_simple` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rows_simple, out.shape[0], out.size, a, b, m, n, half, lo, hi, out)


def mul_rowscalar_simple(a, b, m, n, half, lo, hi, out):
    """:func:`_mul_rowscalar_simple` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rowscalar_simple, out.shape[0], out.size, a, b, m, n, half, lo, hi, out)


def add_rowscalar_simple(a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_rowscalar_simple` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rowscalar_simple, out.shape[0], out.size, a, b, A, B, n, half, lo, hi, out)


def add_rowscalar(a, b, A, B, n, lo, hi, mode, out):
    """:func:`_add_rowscalar` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rowscalar, out.shape[0], out.size, a, b, A, B, n, lo, hi, mode, out)


def add_same_simple(a, b, A, B, n, half, lo, hi, out):
    """:func:`_add_same_simple` over all elements (1-D), split across the cores when the tensor is big enough."""
    over_rows(_add_same_simple, out.size, out.size, a, b, A, B, n, half, lo, hi, out)


def scalar_affine_pair(x, first, second, out):
    """:func:`_scalar_affine_pair` over all elements (1-D; ``first``/``second``: each stage's
    ``(f, g, u, c, h, n, lo, hi)``), split across the cores when the tensor is big enough."""
    over_rows(_scalar_affine_pair, out.size, out.size, x, *first, *second, out)


def mul_same_simple(a, b, m, n, half, lo, hi, out):
    """:func:`_mul_same_simple` over all elements (1-D), split across the cores when the tensor is big enough."""
    over_rows(_mul_same_simple, out.size, out.size, a, b, m, n, half, lo, hi, out)


def dequantize(q, scale, out):
    """:func:`_dequantize` over all elements (1-D), split across the cores when the tensor is big enough."""
    over_rows(_dequantize, out.size, out.size, q, scale, out)


def lookup(x, table, offset, out):
    """:func:`_lookup` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_lookup, x.size, x.size, x, table, offset, out)


def quantize(x, scale, qmin, qmax, out):
    """:func:`_quantize` over a flat tensor, split across the cores when it is big enough."""
    over_rows(_quantize, x.size, x.size, x, scale, qmin, qmax, out)


def row_sums_requant(x, M, n, clamp, pre, lo, hi, mode, out):
    """:func:`_row_sums_requant` of a 2-D ``x`` into 1-D ``out``, split across the cores when ``x`` is big enough."""
    over_rows(_row_sums_requant, x.shape[0], x.size, x, M, n, clamp, pre, lo, hi, mode, out)


def digits_u8(x, out):
    """:func:`_digits_u8` of int16 ``x`` (C-contiguous, any shape) into ``out`` (``(2,) + x.shape``, C-contiguous:
    ``out[0]`` the high digits, ``out[1]`` the low ones), split across the cores when the tensor is big enough."""
    _over_digits(_digits_u8, x, out)


def digits_i8(x, out):
    """:func:`_digits_i8` as :func:`digits_u8` runs its loop."""
    _over_digits(_digits_i8, x, out)


def _over_digits(loop, x, out):
    if not (x.flags.c_contiguous and out.flags.c_contiguous and out.shape == (2,) + x.shape):
        raise ValueError("digits: x and out must be C-contiguous, out of shape (2,) + x.shape")
    flat = out.reshape(2, -1)
    over_rows(loop, x.size, x.size, x.reshape(-1), flat[0], flat[1])


def depthwise_rows(x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, geometry, out):
    """:func:`_depthwise_rows` (stride 1) or :func:`_depthwise_rows_phased` (strided) over all output planes, split
    across the cores when the tensor is big enough."""
    loop = _depthwise_rows if geometry[0] == 1 and geometry[1] == 1 else _depthwise_rows_phased
    over_rows(loop, out.shape[0], 9 * out.size, x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, geometry, out)


def depthwise_3x3(x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, stride, before, out):
    """:func:`_depthwise_3x3_flat` (``stride`` 1; ``x (N*C, H, W)``) or :func:`_depthwise_3x3_phases` (2; ``x`` int8
    of even ``H``, ``W``, ``before`` zeros above and to the left) into ``out (N*C, OH*OW)``, split across the cores
    when the tensor is big enough. The work counts two elements an output: the loops take 0.6-1 ns an output (one
    thread, MobileNetV2's planes), two of the requantizing loops' elements, so 14 x 14 and 7 x 7 layers (50-70 us)
    stay on one core; counted as nine (:func:`depthwise_rows`) they split, for 0.92-0.94x the CPU and no better wall
    at batch 1, two threads, load 4 (in-process alternation, 20 rounds of 8 samples, twice)."""
    if stride == 1:
        over_rows(_depthwise_3x3_flat, out.shape[0], 2 * out.size, x, w, bias, M, n, half, clamp, pre, lo, hi, mode, simple, out)
    else:
        over_rows(_depthwise_3x3_phases, out.shape[0], 2 * out.size, x.view(np.int16), w, bias, M, n, half, clamp, pre, lo, hi,
                  mode, simple, before, out)


def columns_3x3_s2(x, before, out):
    """:func:`_columns_3x3_s2` of int8 codes ``x (N*C, H, W)`` into ``out (N*C, 9, OH*OW)``; a copy at about 0.05 ns a
    byte, so it counts an eighth of an element's work a byte and splits over the cores only past 2M bytes."""
    over_rows(_columns_3x3_s2, out.shape[0], out.size // 8, x.view(np.int16), before, out)
