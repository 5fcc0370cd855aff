"""The exact quantile line behind the learned prefill floor, against scikit-learn's LP solution."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import QuantileRegressor

from detectors.quantile_line import pinball_loss, quantile_line


def sklearn_line(x: np.ndarray, y: np.ndarray, quantile: float) -> tuple[float, float]:
    model = QuantileRegressor(quantile=quantile, alpha=0.0, solver="highs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x[:, None], y)
    return float(model.intercept_), float(model.coef_[0])


def test_a_line_under_every_sample_but_touching_two_is_the_low_quantile_line() -> None:
    # Every sample on or above y = 0.05 + 3e-5 x, two of them exactly on it: for a quantile
    # below 1/n that line has the smallest loss, and the answer is exact.
    x = np.array([1_000.0, 5_000.0, 20_000.0, 40_000.0, 60_000.0])
    y = np.array([0.08, 0.30, 0.65, 1.40, 1.85])
    assert quantile_line(x, y, 0.02) == pytest.approx((0.05, 3e-5), rel=1e-12)


def test_the_median_line_of_symmetric_noise_is_the_middle_line() -> None:
    x = np.array([0.0, 0.0, 0.0, 10.0, 10.0, 10.0])
    y = np.array([0.0, 1.0, 2.0, 20.0, 21.0, 22.0])
    # Through the middle sample of each column: (0, 1) and (10, 21).
    assert quantile_line(x, y, 0.5) == pytest.approx((1.0, 2.0))


def test_no_spread_in_x_gives_a_flat_line_at_the_quantile_of_y() -> None:
    x = np.full(10, 4096.0)
    y = np.arange(10.0)
    assert quantile_line(x, y, 0.2) == (1.0, 0.0)
    assert quantile_line(np.array([7.0]), np.array([3.0]), 0.02) == (3.0, 0.0)


@pytest.mark.parametrize("quantile", [0.02, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("shape", ["continuous", "rounded x", "rounded y", "rounded both"])
def test_the_loss_is_the_linear_programs_optimum(quantile: float, shape: str) -> None:
    rng = np.random.default_rng(int(quantile * 100) + len(shape))
    for n in (5, 50, 114, 512):
        x = rng.integers(256, 900_000, size=n).astype(float)
        y = 0.05 + 3.3e-5 * x * rng.uniform(1.0, 3.0, size=n) + rng.exponential(0.5, size=n)
        if "x" in shape or "both" in shape:
            x = np.round(x, -5)  # many samples share a prompt length
        if "y" in shape or "both" in shape:
            y = np.round(y, 0)  # timings logged coarsely: ties everywhere
        ours = quantile_line(x, y, quantile)
        theirs = sklearn_line(x, y, quantile)
        loss, best = pinball_loss(x, y, quantile, ours), pinball_loss(x, y, quantile, theirs)
        # Never worse than HiGHS (beyond rounding); with distinct samples the optimum is unique.
        assert loss <= best * (1 + 1e-9) + 1e-12
        if shape == "continuous":
            assert ours == pytest.approx(theirs, rel=1e-7, abs=1e-12)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        quantile_line(np.array([]), np.array([]), 0.1)
    with pytest.raises(ValueError):
        quantile_line(np.array([1.0, 2.0]), np.array([1.0]), 0.1)


def test_sklearn_solver_gives_the_same_floor_and_verdicts_as_the_exact_one() -> None:
    from detectors.examples import incident_events
    from detectors.impossibly_fast_prefill import ImpossiblyFastPrefill
    from detectors.pipeline import DetectionPipeline

    runs = {}
    coefs = {}
    for solver in ("exact", "sklearn"):
        det = ImpossiblyFastPrefill({"solver": solver, "min_history": 5, "refit_every": 5})
        findings = list(DetectionPipeline(detectors=[det]).run(incident_events()))
        runs[solver] = sorted((f.bootstrap_room, f.severity, f.exposure) for f in findings)
        coefs[solver] = {
            (key, band): model.coef
            for key, bands in det.models_.items()
            for band, model in bands.items()
            if model.coef is not None  # a band with too few samples yet has no floor
        }
    assert runs["exact"] == runs["sklearn"]
    assert runs["exact"], "the example must produce findings"
    assert coefs["exact"].keys() == coefs["sklearn"].keys() and coefs["exact"]
    for key, (intercept, slope) in coefs["exact"].items():
        ref_intercept, ref_slope = coefs["sklearn"][key]
        assert abs(intercept - ref_intercept) < 1e-6 and abs(slope - ref_slope) < 1e-9
