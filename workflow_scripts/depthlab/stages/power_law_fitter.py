"""The generic power-law fitter: sums of power-law terms in positive variables plus a floor.

A law is

    L = sum_k c_k / F_k^a_k [+ L0]          (F_k positive features of each point)

e.g. Liu et al.'s decomposed width/depth/data law, the Hoffmann et al. reference form (both in
depthlab.stages.scaling.fits), or the toy models' loss against student depth
(depthlab.stages.toy.fit): shared by both stages, so neither imports the other. Every term is
parameterised in log space, as in Besiroglu et al.'s LSE form:

    log L_hat = logsumexp(b_1 - a_1 x_1, ..., b_K - a_K x_K, e),   x_k = log(F_k / F_ref_k),

with F_ref_k the geometric mean of feature k over the fitted points. Centring the features keeps
b_k near log(loss) whatever the units (D ~ 1e10 would otherwise tie b_D to a_D), and the reported
coefficients are converted back: log c_k = b_k + a_k log F_ref_k, L0 = exp(e). A feature may
enter shifted, as (F_k - offset_k) (`offsets`, e.g. Liu et al.'s depth offset l - k).

The objective is on log L: least squares (0.5 sum r^2) or Huber with threshold delta (Besiroglu:
delta = 1e-3), r = log L_hat - log L. It is minimised from the best points of a grid of starts
with scipy.optimize.least_squares (trust-region reflective, analytic Jacobian; its `huber` loss
with f_scale = delta is exactly the Huber objective) or with L-BFGS-B and an analytic gradient.
Bootstrap resamples are refitted either from the start grid like the full fit (refit="full", as
Liu et al. refit each resample from scratch) or from the full fit's optimum alone (refit="warm",
about n_refine times cheaper; it can miss an optimum a resample moves to).

Resampling and held-out validation take their units as arrays (`groups`: which points move
together; `sizes`: what orders units for extrapolation), so this module knows nothing about
models, architectures or configs.

Size: one fitter with its start grid, both optimisers, the bootstrap and held-out validation,
which share the parameterisation above.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd
from scipy import optimize

from depthlab.settings.defaults import default

# ---------------------------------------------------------------------------------------------
# Laws and settings


@dataclasses.dataclass(frozen=True)
class Law:
    """A sum of power-law terms in `features` plus a floor; names follow the paper of origin."""

    name: str
    equation: str
    features: tuple[str, ...]  # point columns, one per term
    coefficients: tuple[str, ...]  # c_k, one per term
    exponents: tuple[str, ...]  # a_k, one per term
    floor: str | None  # irreducible loss (L0 / E); None: no floor term

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = tuple(itertools.chain.from_iterable(zip(self.coefficients, self.exponents)))
        return names + ((self.floor,) if self.floor else ())

    @property
    def n_parameters(self) -> int:
        return 2 * len(self.features) + (1 if self.floor else 0)


# Numerical guard only: log-coefficients may range this far around log(median loss).
LOG_TERM_RANGE = (-30.0, 10.0)


@dataclasses.dataclass
class FitSettings:
    """How a law is fitted. Defaults mirror config/default.yaml `scaling.fit` (the source of truth);
    the exponent bounds of a fit that sets none are config/schema.yaml's default."""

    objective: str = "least_squares"  # least_squares | huber (on log loss)
    huber_delta: float = 1e-3
    optimizer: str = "least_squares"  # least_squares (TRF) | lbfgsb
    exponent_bounds: tuple[float, float] = tuple(default("scaling", "fit", "exponent_bounds"))
    start_exponents: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
    start_term_fractions: tuple[float, ...] = (0.03, 0.3)  # term value / median loss at F_ref
    start_floor_fractions: tuple[float, ...] = (0.3, 0.8)  # floor / min loss
    n_refine: int = 16  # grid points (lowest objective first) to optimise

    def __post_init__(self):
        if self.objective not in ("least_squares", "huber"):
            raise ValueError(f"objective: '{self.objective}' is not least_squares or huber")
        if self.optimizer not in ("least_squares", "lbfgsb"):
            raise ValueError(f"optimizer: '{self.optimizer}' is not least_squares or lbfgsb")
        if not self.huber_delta > 0:
            raise ValueError(f"huber_delta: {self.huber_delta} must be positive")
        lo, hi = self.exponent_bounds
        if not lo < hi:
            raise ValueError(f"exponent_bounds: {self.exponent_bounds} is not an interval")
        if self.n_refine < 1:
            raise ValueError(f"n_refine: {self.n_refine} must be at least 1")

    @classmethod
    def from_config(cls, spec: dict) -> FitSettings:
        """Settings from a config fit spec; keys that are not fit settings are ignored."""
        fields = {f.name for f in dataclasses.fields(cls)}
        grid = spec.get("start_grid") or {}
        kwargs = {k: v for k, v in spec.items() if k in fields}
        if grid:
            kwargs.update(
                start_exponents=tuple(grid["exponents"]),
                start_term_fractions=tuple(grid["term_fractions"]),
                start_floor_fractions=tuple(grid["floor_fractions"]),
            )
        if "exponent_bounds" in kwargs:
            kwargs["exponent_bounds"] = tuple(kwargs["exponent_bounds"])
        return cls(**kwargs)


# ---------------------------------------------------------------------------------------------
# Points and design matrices


def check_points(frame: pd.DataFrame, law: Law, source: str = "points") -> None:
    """Every feature the law needs is present, finite and positive; loss is finite and positive."""
    for column in (*law.features, "loss"):
        if column not in frame.columns:
            raise ValueError(f"{source}: the {law.name} law needs a '{column}' column")
        values = frame[column].to_numpy(float)
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            row = (
                int(frame["row"].iloc[np.flatnonzero(bad)[0]])
                if "row" in frame
                else int(np.flatnonzero(bad)[0])
            )
            raise ValueError(
                f"{source}: column '{column}' must be finite and positive "
                f"(row {row}: {values[bad][0]})"
            )


def design_matrix(
    frame: pd.DataFrame, law: Law, offsets: dict | None = None, log_refs: np.ndarray | None = None
) -> np.ndarray:
    """(n, K) log features, feature k as log(F_k - offsets[k]), centred on `log_refs` (None: not
    centred)."""
    offsets = offsets or {}
    unknown = sorted(set(offsets) - set(law.features))
    if unknown:
        raise ValueError(f"offsets: '{unknown[0]}' is not a feature of the {law.name} law")
    columns = []
    for feature in law.features:
        values = frame[feature].to_numpy(float)
        offset = offsets.get(feature, 0.0)
        if offset:
            values = values - offset
            if (values <= 0).any():
                raise ValueError(
                    f"offset of {feature}: {offset:g} is not below every {feature} "
                    f"(smallest {feature} {values.min() + offset:g})"
                )
        columns.append(np.log(values))
    X = np.stack(columns, axis=1)
    if log_refs is None:
        return X
    return X - log_refs


# ---------------------------------------------------------------------------------------------
# The fitter on centred log features X: (n, K) and targets y = log L: (n,)


def _split(theta: np.ndarray, n_terms: int):
    b = theta[..., 0 : 2 * n_terms : 2]
    a = theta[..., 1 : 2 * n_terms : 2]
    e = theta[..., 2 * n_terms] if theta.shape[-1] > 2 * n_terms else None
    return b, a, e


def _log_terms(theta: np.ndarray, X: np.ndarray, floor: bool) -> np.ndarray:
    """z: (..., n, K[+1]) log of each term (and of the floor) at each point."""
    b, a, e = _split(theta, X.shape[1])
    z = b[..., None, :] - a[..., None, :] * X
    if floor:
        z = np.concatenate([z, np.broadcast_to(e[..., None, None], z.shape[:-1] + (1,))], -1)
    return z


def predict_log_centred(theta: np.ndarray, X: np.ndarray, floor: bool = True) -> np.ndarray:
    z = _log_terms(theta, X, floor)
    zmax = z.max(-1, keepdims=True)
    return (zmax + np.log(np.exp(z - zmax).sum(-1, keepdims=True)))[..., 0]


def _residual_and_jacobian(theta, X, y, floor):
    """r = log L_hat - log L and dr/dtheta (softmax weights of the terms, eq. of the LSE form)."""
    z = _log_terms(theta, X, floor)
    zmax = z.max(-1, keepdims=True)
    w = np.exp(z - zmax)
    total = w.sum(-1, keepdims=True)
    f = (zmax + np.log(total))[:, 0]
    w /= total
    n_terms = X.shape[1]
    jac = np.empty((len(y), theta.size))
    jac[:, 0 : 2 * n_terms : 2] = w[:, :n_terms]
    jac[:, 1 : 2 * n_terms : 2] = -w[:, :n_terms] * X
    if floor:
        jac[:, -1] = w[:, -1]
    return f - y, jac


def _rho(r: np.ndarray, objective: str, delta: float) -> np.ndarray:
    if objective == "least_squares":
        return 0.5 * r**2
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r**2, delta * (a - 0.5 * delta))


def _rho_prime(r: np.ndarray, objective: str, delta: float) -> np.ndarray:
    if objective == "least_squares":
        return r
    return np.clip(r, -delta, delta)


def objective_value(r: np.ndarray, settings: FitSettings) -> float:
    return float(_rho(r, settings.objective, settings.huber_delta).sum())


def parameter_bounds(n_terms: int, floor: bool, y: np.ndarray, settings: FitSettings):
    """(lo, hi) of the centred parameters: exponents within settings.exponent_bounds, log terms
    within LOG_TERM_RANGE of the median log loss."""
    centre = float(np.median(y))
    lo_b, hi_b = centre + LOG_TERM_RANGE[0], centre + LOG_TERM_RANGE[1]
    lo = [lo_b, settings.exponent_bounds[0]] * n_terms + ([lo_b] if floor else [])
    hi = [hi_b, settings.exponent_bounds[1]] * n_terms + ([hi_b] if floor else [])
    return np.array(lo), np.array(hi)


def start_grid(n_terms: int, floor: bool, y: np.ndarray, settings: FitSettings) -> np.ndarray:
    """All combinations of start exponents, term sizes (fractions of the median loss at F_ref)
    and floors (fractions of the smallest loss), as centred parameter vectors (G, P)."""
    median, smallest = float(np.exp(np.median(y))), float(np.exp(y.min()))
    term_b = np.log(np.array(settings.start_term_fractions) * median)
    axes = [term_b, np.array(settings.start_exponents)] * n_terms
    if floor:
        axes.append(np.log(np.array(settings.start_floor_fractions) * smallest))
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def _refine(theta0, X, y, floor, settings, lo, hi):
    """One local optimisation; returns (theta, objective, converged)."""
    theta0 = np.clip(theta0, lo, hi)
    if settings.optimizer == "least_squares":
        res = optimize.least_squares(
            lambda t: _residual_and_jacobian(t, X, y, floor)[0],
            theta0,
            jac=lambda t: _residual_and_jacobian(t, X, y, floor)[1],
            bounds=(lo, hi),
            method="trf",
            loss="linear" if settings.objective == "least_squares" else "huber",
            f_scale=settings.huber_delta,
            x_scale="jac",
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
            max_nfev=2000,
        )
        theta, ok = res.x, res.status > 0
    else:

        def fun(t):
            r, jac = _residual_and_jacobian(t, X, y, floor)
            return (
                _rho(r, settings.objective, settings.huber_delta).sum(),
                jac.T @ _rho_prime(r, settings.objective, settings.huber_delta),
            )

        res = optimize.minimize(
            fun,
            theta0,
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(lo, hi)),
            options={"maxiter": 10000, "ftol": 1e-15, "gtol": 1e-12},
        )
        theta, ok = res.x, bool(res.success)
    r, _ = _residual_and_jacobian(theta, X, y, floor)
    return theta, objective_value(r, settings), ok


def fit_centred(
    X: np.ndarray,
    y: np.ndarray,
    settings: FitSettings,
    floor: bool = True,
    warm_start: np.ndarray | None = None,
) -> dict:
    """Minimise the objective over centred parameters: from `warm_start` alone, or from the
    n_refine best points of the start grid. Returns theta, objective, starts tried, spread."""
    n, n_terms = X.shape
    n_params = 2 * n_terms + (1 if floor else 0)
    if n < n_params:
        raise ValueError(
            f"only {n} points for {n_params} parameters: a fit needs at least as "
            f"many points as parameters"
        )
    lo, hi = parameter_bounds(n_terms, floor, y, settings)
    if warm_start is not None:
        starts = warm_start[None, :]
    else:
        grid = np.clip(start_grid(n_terms, floor, y, settings), lo, hi)
        # Vectorised objective over the whole grid, in chunks to bound memory.
        values = np.concatenate(
            [
                _rho(
                    predict_log_centred(chunk, X, floor) - y,
                    settings.objective,
                    settings.huber_delta,
                ).sum(-1)
                for chunk in np.array_split(grid, max(1, grid.shape[0] * n // 2_000_000 + 1))
            ]
        )
        starts = grid[np.argsort(values, kind="stable")[: settings.n_refine]]
    best, results = None, []
    for start in starts:
        theta, value, ok = _refine(start, X, y, floor, settings, lo, hi)
        results.append(value)
        if best is None or value < best[1]:
            best = (theta, value, ok)
    results = np.array(results)
    return {
        "theta": best[0],
        "objective": best[1],
        "converged": best[2],
        "n_starts": len(starts),
        # how many local optimisations ended within 1e-6 (relative) of the best objective
        "n_starts_at_best": int(np.sum(results <= best[1] * (1 + 1e-6) + 1e-15)),
    }


# ---------------------------------------------------------------------------------------------
# Fits on points


def theta_to_estimates(theta: np.ndarray, law: Law, log_refs: np.ndarray) -> dict:
    """Centred parameters -> the law's coefficients in the data's units, exponents and floor."""
    b, a, e = _split(np.asarray(theta, float), len(law.features))
    out = {}
    for k, (coef, expo) in enumerate(zip(law.coefficients, law.exponents)):
        log_c = float(b[k] + a[k] * log_refs[k])
        out[coef] = math.exp(log_c) if log_c < 700 else math.inf
        out[f"log_{coef}"] = log_c
        out[expo] = float(a[k])
    if law.floor:
        out[law.floor] = float(np.exp(e))
    return out


@dataclasses.dataclass
class FitResult:
    law: Law
    settings: FitSettings
    theta: np.ndarray  # centred parameters
    log_refs: np.ndarray  # log F_ref_k
    X: np.ndarray
    y: np.ndarray
    points: pd.DataFrame  # the points used
    objective: float
    converged: bool
    n_starts: int
    n_starts_at_best: int
    offsets: dict = dataclasses.field(default_factory=dict)  # feature -> offset (F - offset)

    @property
    def floor(self) -> bool:
        return self.law.floor is not None

    @property
    def estimates(self) -> dict:
        return theta_to_estimates(self.theta, self.law, self.log_refs)

    @property
    def residuals(self) -> np.ndarray:
        """log L - log L_hat per point (positive: the law under-predicts)."""
        return self.y - predict_log_centred(self.theta, self.X, self.floor)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        X = design_matrix(frame, self.law, self.offsets, self.log_refs)
        return np.exp(predict_log_centred(self.theta, X, self.floor))

    def parameters_at_bounds(self) -> list[str]:
        """Parameters pinned at a bound (an exponent at exponent_bounds, a vanishing term or
        floor): a sign that the points do not identify them."""
        lo, hi = parameter_bounds(len(self.law.features), self.floor, self.y, self.settings)
        tol = 1e-6 * np.maximum(1.0, np.abs(self.theta))
        pinned = (self.theta - lo < tol) | (hi - self.theta < tol)
        return [name for name, flag in zip(self.law.parameter_names, pinned) if flag]

    def negligible_terms(self, fraction: float = 1e-4) -> list[str]:
        """Terms (named by their coefficient, or the floor) below `fraction` of the predicted
        loss at every point: the fit switched them off, so their exponent means nothing."""
        z = _log_terms(self.theta, self.X, self.floor)
        share = np.exp(z - predict_log_centred(self.theta, self.X, self.floor)[:, None])
        names = list(self.law.coefficients) + ([self.law.floor] if self.floor else [])
        return [name for name, col in zip(names, share.T) if col.max() < fraction]

    def jacobian_standard_errors(self) -> dict:
        """Asymptotic standard errors of the exponents and floor, s^2 (J^T J)^-1 (least squares)."""
        r, jac = _residual_and_jacobian(self.theta, self.X, self.y, self.floor)
        dof = len(r) - self.theta.size
        if dof <= 0:
            return {}
        try:
            cov = np.linalg.inv(jac.T @ jac) * float(r @ r) / dof
        except np.linalg.LinAlgError:
            return {}
        # A singular J^T J (a parameter pinned at a bound, an unidentified term) gives no error.
        var = np.where(np.isfinite(np.diag(cov)) & (np.diag(cov) >= 0), np.diag(cov), np.nan)
        out = {name: float(np.sqrt(var[2 * k + 1])) for k, name in enumerate(self.law.exponents)}
        if self.floor:  # L0 = exp(e): delta method
            out[self.law.floor] = float(np.exp(self.theta[-1]) * np.sqrt(var[-1]))
        return {k: (v if math.isfinite(v) else None) for k, v in out.items()}


def fit_law(
    frame: pd.DataFrame,
    law: Law,
    settings: FitSettings | None = None,
    source: str = "points",
    offsets: dict | None = None,
) -> FitResult:
    """Fit `law` to the points of `frame` (the law's feature columns and `loss`); features are
    centred on their geometric means over these points."""
    settings = settings or FitSettings()
    check_points(frame, law, source)
    if len(frame) < law.n_parameters:
        raise ValueError(
            f"{source}: only {len(frame)} points for the {law.n_parameters} "
            f"parameters of the {law.name} law ({law.equation})"
        )
    raw = design_matrix(frame, law, offsets)
    log_refs = raw.mean(axis=0)
    X, y = raw - log_refs, np.log(frame["loss"].to_numpy(float))
    out = fit_centred(X, y, settings, floor=law.floor is not None)
    return FitResult(
        law,
        settings,
        out["theta"],
        log_refs,
        X,
        y,
        frame.reset_index(drop=True),
        out["objective"],
        out["converged"],
        out["n_starts"],
        out["n_starts_at_best"],
        dict(offsets or {}),
    )


# ---------------------------------------------------------------------------------------------
# Bootstrap and held-out validation


BOOTSTRAP_REFITS = ("full", "warm")


def resample_indices(rng: np.random.Generator, n: int, groups: np.ndarray | None) -> np.ndarray:
    """Indices of one bootstrap sample: points with replacement, or whole groups with replacement."""
    if groups is None:
        return rng.integers(0, n, size=n)
    members = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    chosen = rng.integers(0, len(members), size=len(members))
    return np.concatenate([members[g] for g in chosen])


def bootstrap(
    result: FitResult,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    groups: np.ndarray | None = None,
    refit: str = "warm",
) -> dict:
    """Refit on resampled points (or whole groups of points, `groups`: one label per point),
    each from the start grid (refit="full") or from the full fit's optimum (refit="warm");
    percentile intervals. Returns {"samples": DataFrame, "intervals": {...}, "resamples",
    "failures", "confidence", "seed", "refit", "local_fits" (local optimisations run)}."""
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap.confidence: {confidence} must be in (0, 1)")
    if refit not in BOOTSTRAP_REFITS:
        raise ValueError(f"bootstrap.refit: '{refit}' is not one of {', '.join(BOOTSTRAP_REFITS)}")
    rng = np.random.default_rng(seed)
    warm_start = result.theta if refit == "warm" else None
    rows, failures, local_fits = [], 0, 0
    for _ in range(resamples):
        idx = resample_indices(rng, len(result.y), groups)
        try:
            out = fit_centred(
                result.X[idx], result.y[idx], result.settings, result.floor, warm_start=warm_start
            )
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            failures += 1
            continue
        local_fits += out["n_starts"]
        rows.append(theta_to_estimates(out["theta"], result.law, result.log_refs))
    samples = pd.DataFrame(
        rows, columns=list(theta_to_estimates(result.theta, result.law, result.log_refs))
    )
    tail = (1 - confidence) / 2
    intervals = {}
    for name in samples.columns:
        values = samples[name].to_numpy(float)
        values = values[np.isfinite(values)]
        if not len(values):
            continue
        intervals[name] = {
            "low": float(np.quantile(values, tail)),
            "high": float(np.quantile(values, 1 - tail)),
            "median": float(np.median(values)),
            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        }
    return {
        "samples": samples,
        "intervals": intervals,
        "resamples": resamples,
        "failures": failures,
        "confidence": confidence,
        "seed": seed,
        "refit": refit,
        "local_fits": local_fits,
    }


def split_scores(result: FitResult, test: pd.DataFrame) -> dict:
    """Log-loss errors of a fit on its own points and on held-out `test` points."""
    train_r = result.residuals
    test_r = np.log(test["loss"].to_numpy(float)) - np.log(result.predict(test))
    return {
        "n_train": int(len(train_r)),
        "n_test": int(len(test_r)),
        "rmse_log_train": float(np.sqrt(np.mean(train_r**2))),
        "rmse_log_test": float(np.sqrt(np.mean(test_r**2))),
        "mean_abs_rel_error_test": float(np.mean(np.abs(np.expm1(-test_r)))),
        "exponents": {k: result.estimates[k] for k in result.law.exponents},
    }


def held_out_validation(
    frame: pd.DataFrame,
    law: Law,
    settings: FitSettings,
    random_groups: np.ndarray,
    extrapolation_groups: np.ndarray,
    sizes: np.ndarray,
    random_splits: int = 5,
    test_fraction: float = 0.2,
    extrapolation_train_fraction: float = 0.7,
    seed: int = 0,
    offsets: dict | None = None,
) -> dict:
    """Fit on part of the points, score log-loss error on the rest.

    random: `random_splits` random test sets of `test_fraction` of the units of `random_groups`
    (one label per point; np.arange(n) for single points). extrapolation: train on the smallest
    `extrapolation_train_fraction` of the units of `extrapolation_groups`, a unit's size being the
    largest of its points' `sizes`, and test on the larger ones. Splits too small to fit are
    reported with an "error" entry instead. Row order of `frame` matches the arrays.
    """
    frame = frame.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    groups = np.asarray(random_groups)
    unique = np.unique(groups)

    def run(train_mask):
        train, test = frame[train_mask], frame[~train_mask]
        if len(test) == 0:
            return {"error": "empty test set"}
        try:
            return split_scores(fit_law(train, law, settings, offsets=offsets), test)
        except ValueError as error:
            return {"error": str(error)}

    random = []
    for _ in range(random_splits):
        n_test = max(1, int(round(test_fraction * len(unique))))
        test_groups = rng.choice(unique, size=n_test, replace=False)
        random.append(run(~np.isin(groups, test_groups)))
    arch = np.asarray(extrapolation_groups)
    size = np.asarray(sizes, float)
    arch_size = np.array([size[arch == a].max() for a in np.unique(arch)])
    n_train_arch = int(math.floor(extrapolation_train_fraction * len(arch_size)))
    small = np.unique(arch)[np.argsort(arch_size, kind="stable")[:n_train_arch]]
    extrapolation = run(np.isin(arch, small))
    extrapolation["size_cut"] = (
        float(arch_size[np.argsort(arch_size)][n_train_arch - 1]) if n_train_arch else None
    )
    ok = [s["rmse_log_test"] for s in random if "rmse_log_test" in s]
    return {
        "random": random,
        "extrapolation": extrapolation,
        "mean_rmse_log_test_random": float(np.mean(ok)) if ok else None,
    }
