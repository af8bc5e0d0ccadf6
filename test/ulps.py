"""Comparing two different codes that compute the same quantity (a compiled kernel against the numpy
reference, our kernels against Pinocchio): equal to a few ulps of the quantity's scale, not bit for bit.

Their floating-point results legitimately differ in the last bits, and by how much depends on the
machine: numpy's matrix-vector products go through OpenBLAS, whose kernel (and so summation order
and FMA use) is chosen per CPU (on an AVX-512 machine the Pinocchio-pass leg kinematics differ from
the reference by 1-2 ulps; with ``OPENBLAS_CORETYPE=Haswell`` the same process is bit-identical),
glibc's libm picks FMA variants per CPU, and numba compiles for the host CPU. Bit-identity is
asserted only where the same code runs on the same inputs (a run twice, lockstep ROS == headless,
container == processes), or where the result is exact on every IEEE-754 machine (a copy, a
negation, a constant, ``x - 0 * y``)."""

from __future__ import annotations

import numpy as np

EPS = np.finfo(float).eps
ULPS = 16


def scale_of(ref) -> float:
    """The magnitude an absolute rounding error of ``ref`` is measured against: ``max(1, |ref|)``."""
    return max(1.0, float(np.abs(np.asarray(ref, dtype=float)).max(initial=0.0)))


def assert_ulps_close(actual, ref, ulps: float = ULPS, scale=None, err_msg: str = "") -> None:
    """``|actual - ref| <= ulps * eps * scale`` elementwise; ``scale`` defaults to
    :func:`scale_of` ``(ref)`` and may be an array broadcasting against ``ref``."""
    a, r = np.asarray(actual, dtype=float), np.asarray(ref, dtype=float)
    assert a.shape == r.shape, f"{err_msg}: shape {a.shape} != {r.shape}"
    s = np.broadcast_to(scale_of(r) if scale is None else np.asarray(scale, dtype=float), r.shape)
    diff = np.abs(a - r)
    bad = ~(diff <= ulps * EPS * s)                  # NaN anywhere: bad
    if bad.any():
        worst = float(np.nanmax(np.where(bad, diff / (EPS * s), 0.0)))
        raise AssertionError(f"{err_msg}: {int(bad.sum())} of {r.size} entries differ by more than {ulps} ulps "
                             f"of their scale (worst {worst:.1f})\nactual    {a!r}\nreference {r!r}")
