"""Scaling-law fits: the decomposed width/depth/data law and the Chinchilla reference form.

Liu et al. (2026), "Inverse Depth Scaling From Most Layers Being Similar", fit

    L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0          (m width, l depth, D tokens)

and Hoffmann et al. (2022) / Besiroglu et al. (2024) fit the reference form

    L = E + A/N^alpha + B/D^beta.

Both are sums of power-law terms plus a floor, so one fitter serves both. Every term is
parameterised in log space, as in Besiroglu's LSE form:

    log L_hat = logsumexp(b_1 - a_1 x_1, ..., b_K - a_K x_K, e),   x_k = log(F_k / F_ref_k),

with F_ref_k the geometric mean of feature k over the fitted points. Centring the features keeps
b_k near log(loss) whatever the units (D ~ 1e10 would otherwise tie b_D to a_D), and the reported
coefficients are converted back: log c_k = b_k + a_k log F_ref_k, L0 = exp(e).

The objective is on log L: least squares (0.5 sum r^2) or Huber with threshold delta (Besiroglu:
delta = 1e-3), r = log L_hat - log L. It is minimised from the best points of a grid of starts
with scipy.optimize.least_squares (trust-region reflective, analytic Jacobian; its `huber` loss
with f_scale = delta is exactly the Huber objective) or with L-BFGS-B and an analytic gradient.
Bootstrap resamples warm-start from the full fit, which keeps 1000 resamples to seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

from .io import json_safe

# ---------------------------------------------------------------------------------------------
# Laws


@dataclasses.dataclass(frozen=True)
class Law:
    """A sum of power-law terms in `features` plus a floor; names follow the paper of origin."""

    name: str
    equation: str
    features: tuple[str, ...]          # canonical point columns, one per term
    coefficients: tuple[str, ...]      # c_k, one per term
    exponents: tuple[str, ...]         # a_k, one per term
    floor: str | None                  # irreducible loss (L0 / E); None: no floor term

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = tuple(itertools.chain.from_iterable(zip(self.coefficients, self.exponents)))
        return names + ((self.floor,) if self.floor else ())

    @property
    def n_parameters(self) -> int:
        return 2 * len(self.features) + (1 if self.floor else 0)


LAWS = {
    "decomposed": Law("decomposed", "L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0",
                      ("width", "depth", "tokens"), ("c_m", "c_l", "c_D"), ("a_m", "a_l", "a_D"),
                      "L0"),
    "reference": Law("reference", "L = E + A/N^alpha + B/D^beta", ("params", "tokens"),
                     ("A", "B"), ("alpha", "beta"), "E"),
}

# Numerical guard only: log-coefficients may range this far around log(median loss).
LOG_TERM_RANGE = (-30.0, 10.0)
POINT_COLUMNS = ("width", "depth", "tokens", "loss", "params")


@dataclasses.dataclass
class FitSettings:
    """How a law is fitted. Defaults mirror config/default.yaml `scaling.fit` (the source of truth)."""

    objective: str = "least_squares"          # least_squares | huber (on log loss)
    huber_delta: float = 1e-3
    optimizer: str = "least_squares"          # least_squares (TRF) | lbfgsb
    exponent_bounds: tuple[float, float] = (0.0, 5.0)
    start_exponents: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
    start_term_fractions: tuple[float, ...] = (0.03, 0.3)    # term value / median loss at F_ref
    start_floor_fractions: tuple[float, ...] = (0.3, 0.8)    # floor / min loss
    n_refine: int = 16                        # grid points (lowest objective first) to optimise
    depth_offset: float = 0.0                 # decomposed law: depth enters as (l - k)

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
    def from_config(cls, spec: dict) -> "FitSettings":
        fields = {f.name for f in dataclasses.fields(cls)}
        grid = spec.get("start_grid") or {}
        kwargs = {k: v for k, v in spec.items() if k in fields}
        if grid:
            kwargs.update(start_exponents=tuple(grid["exponents"]),
                          start_term_fractions=tuple(grid["term_fractions"]),
                          start_floor_fractions=tuple(grid["floor_fractions"]))
        if "exponent_bounds" in kwargs:
            kwargs["exponent_bounds"] = tuple(kwargs["exponent_bounds"])
        return cls(**kwargs)


# ---------------------------------------------------------------------------------------------
# Points


def load_points(path: str | Path, columns: dict | None = None) -> pd.DataFrame:
    """Read a CSV of fit points; `columns` maps canonical names (width, depth, tokens, loss,
    params) to the file's column names. Returns canonical columns plus `row` (file order)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scaling points file not found: {path}")
    raw = pd.read_csv(path)
    explicit = dict(columns or {})
    unknown = sorted(set(explicit) - set(POINT_COLUMNS))
    if unknown:
        raise ValueError(f"columns.{unknown[0]}: not one of {', '.join(POINT_COLUMNS)}")
    columns = {name: name for name in POINT_COLUMNS} | explicit
    frame = pd.DataFrame({"row": np.arange(len(raw))})
    for name, source in columns.items():
        if source in raw.columns:
            frame[name] = pd.to_numeric(raw[source], errors="coerce").to_numpy(float)
        elif name in explicit or name in ("loss", "tokens"):
            # a column the user named (or one every law needs) must exist; width/depth/params
            # left at their default names are optional (each law checks what it needs)
            raise ValueError(f"{path}: no column '{source}' for {name} "
                             f"(has: {', '.join(map(str, raw.columns))})")
    return frame


def check_points(frame: pd.DataFrame, law: Law, source: str = "points") -> None:
    """Every feature the law needs is present, finite and positive; loss is finite and positive."""
    for column in (*law.features, "loss"):
        if column not in frame.columns:
            raise ValueError(f"{source}: the {law.name} law needs a '{column}' column")
        values = frame[column].to_numpy(float)
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            row = int(frame["row"].iloc[np.flatnonzero(bad)[0]]) if "row" in frame else \
                int(np.flatnonzero(bad)[0])
            raise ValueError(f"{source}: column '{column}' must be finite and positive "
                             f"(row {row}: {values[bad][0]})")


def drop_highest_losses(frame: pd.DataFrame, k: int, ties: str = "exact") -> pd.DataFrame:
    """Drop the k highest-loss points (the papers' outlier cut).

    ties="exact": exactly k points go; among points tied with the k-th highest loss, the ones
        earlier in the input go first (a stable descending sort).
    ties="inclusive": every point whose loss is >= the k-th highest loss goes, so more than k
        may go when that value is tied. This is what Liu et al.'s released code does
        (`loss < sorted(loss)[-k]`); on the quantised Chinchilla losses k=40 drops 42 points.
    """
    if k < 0:
        raise ValueError(f"drop_highest: {k} must be >= 0")
    if k == 0:
        return frame.copy()
    if k >= len(frame):
        raise ValueError(f"drop_highest: {k} would drop all {len(frame)} points")
    loss = frame["loss"].to_numpy(float)
    if ties == "exact":
        order = np.argsort(-loss, kind="stable")
        keep = np.ones(len(frame), bool)
        keep[order[:k]] = False
    elif ties == "inclusive":
        threshold = np.sort(loss)[::-1][k - 1]
        keep = loss < threshold
    else:
        raise ValueError(f"ties: '{ties}' is not exact or inclusive")
    return frame.loc[keep].copy()


def architecture_ids(frame: pd.DataFrame) -> np.ndarray:
    """Integer id per point of its architecture: the (width, depth) pair, else the model size."""
    if {"width", "depth"} <= set(frame.columns) and frame[["width", "depth"]].notna().all().all():
        keys = list(zip(frame["width"], frame["depth"]))
    elif "params" in frame.columns:
        keys = list(frame["params"])
    else:
        raise ValueError("architecture resampling needs width and depth (or params) columns")
    _, ids = np.unique(np.array(keys, dtype=float).reshape(len(keys), -1), axis=0,
                       return_inverse=True)
    return ids.reshape(-1)


def model_size(frame: pd.DataFrame) -> np.ndarray:
    """Size used to order architectures for extrapolation: params if known, else l * m^2."""
    if "params" in frame.columns and frame["params"].notna().all():
        return frame["params"].to_numpy(float)
    return frame["depth"].to_numpy(float) * frame["width"].to_numpy(float) ** 2


# ---------------------------------------------------------------------------------------------
# Sweep collection


def non_embedding_params(config: dict) -> int:
    """Non-embedding parameters of a LLaMA-style decoder (Kaplan's N) from its config.json."""
    width = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or width // heads
    ffn = config["intermediate_size"]
    attention = width * heads * head_dim * 2 + width * kv_heads * head_dim * 2
    if config.get("attention_bias"):
        attention += heads * head_dim + 2 * kv_heads * head_dim + width
    mlp = 3 * width * ffn + (2 * ffn + width if config.get("mlp_bias") else 0)
    norms = 2 * width
    return int(config["num_hidden_layers"] * (attention + mlp + norms) + width)


def collect_sweep_points(model_dirs, min_tokens: int = 1) -> pd.DataFrame:
    """Validation losses of sweep models at every evaluated token count (one row per point).

    Each model dir needs config.json (hidden_size = m, num_hidden_layers = l) and train_log.csv
    (val rows; tokens = D). Rows with fewer than `min_tokens` tokens (e.g. a step-0 eval) are
    skipped because log D is undefined there; repeated token counts keep the last row.
    """
    frames = []
    for model_dir in map(Path, model_dirs):
        for required in ("config.json", "train_log.csv"):
            if not (model_dir / required).is_file():
                raise FileNotFoundError(f"{model_dir}: missing {required}")
        config = json.loads((model_dir / "config.json").read_text())
        for key in ("hidden_size", "num_hidden_layers"):
            if key not in config:
                raise ValueError(f"{model_dir / 'config.json'}: missing '{key}'")
        log = pd.read_csv(model_dir / "train_log.csv")
        missing = {"tokens", "split", "loss"} - set(log.columns)
        if missing:
            raise ValueError(f"{model_dir / 'train_log.csv'}: missing column "
                             f"'{sorted(missing)[0]}'")
        val = log[(log["split"] == "val") & (log["tokens"] >= min_tokens)]
        val = val.drop_duplicates("tokens", keep="last")
        if val.empty:
            raise ValueError(f"{model_dir / 'train_log.csv'}: no val rows with tokens >= "
                             f"{min_tokens}")
        frames.append(pd.DataFrame({
            "model": model_dir.name,
            "width": config["hidden_size"],
            "depth": config["num_hidden_layers"],
            "params": non_embedding_params(config) if "intermediate_size" in config else np.nan,
            "step": val["step"].to_numpy() if "step" in val else np.nan,
            "tokens": val["tokens"].to_numpy(float),
            "loss": val["loss"].to_numpy(float),
        }))
    if not frames:
        raise ValueError("collect_sweep_points: no model directories given")
    points = pd.concat(frames, ignore_index=True)
    return points.sort_values(["depth", "width", "tokens"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# The fitter (centred log features X: (n, K); targets y = log L: (n,))


def _split(theta: np.ndarray, n_terms: int):
    b = theta[..., 0:2 * n_terms:2]
    a = theta[..., 1:2 * n_terms:2]
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
    jac[:, 0:2 * n_terms:2] = w[:, :n_terms]
    jac[:, 1:2 * n_terms:2] = -w[:, :n_terms] * X
    if floor:
        jac[:, -1] = w[:, -1]
    return f - y, jac


def _rho(r: np.ndarray, objective: str, delta: float) -> np.ndarray:
    if objective == "least_squares":
        return 0.5 * r ** 2
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r ** 2, delta * (a - 0.5 * delta))


def _rho_prime(r: np.ndarray, objective: str, delta: float) -> np.ndarray:
    if objective == "least_squares":
        return r
    return np.clip(r, -delta, delta)


def objective_value(r: np.ndarray, settings: FitSettings) -> float:
    return float(_rho(r, settings.objective, settings.huber_delta).sum())


def _bounds(n_terms: int, floor: bool, y: np.ndarray, settings: FitSettings):
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
            lambda t: _residual_and_jacobian(t, X, y, floor)[0], theta0,
            jac=lambda t: _residual_and_jacobian(t, X, y, floor)[1], bounds=(lo, hi),
            method="trf", loss="linear" if settings.objective == "least_squares" else "huber",
            f_scale=settings.huber_delta, x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12,
            max_nfev=2000)
        theta, ok = res.x, res.status > 0
    else:
        def fun(t):
            r, jac = _residual_and_jacobian(t, X, y, floor)
            return (_rho(r, settings.objective, settings.huber_delta).sum(),
                    jac.T @ _rho_prime(r, settings.objective, settings.huber_delta))

        res = optimize.minimize(fun, theta0, jac=True, method="L-BFGS-B",
                                bounds=list(zip(lo, hi)),
                                options={"maxiter": 10000, "ftol": 1e-15, "gtol": 1e-12})
        theta, ok = res.x, bool(res.success)
    r, _ = _residual_and_jacobian(theta, X, y, floor)
    return theta, objective_value(r, settings), ok


def fit_centred(X: np.ndarray, y: np.ndarray, settings: FitSettings, floor: bool = True,
                warm_start: np.ndarray | None = None) -> dict:
    """Minimise the objective over centred parameters: from `warm_start` alone, or from the
    n_refine best points of the start grid. Returns theta, objective, starts tried, spread."""
    n, n_terms = X.shape
    n_params = 2 * n_terms + (1 if floor else 0)
    if n < n_params:
        raise ValueError(f"only {n} points for {n_params} parameters: a fit needs at least as "
                         f"many points as parameters")
    lo, hi = _bounds(n_terms, floor, y, settings)
    if warm_start is not None:
        starts = warm_start[None, :]
    else:
        grid = np.clip(start_grid(n_terms, floor, y, settings), lo, hi)
        # Vectorised objective over the whole grid, in chunks to bound memory.
        values = np.concatenate([
            _rho(predict_log_centred(chunk, X, floor) - y, settings.objective,
                 settings.huber_delta).sum(-1)
            for chunk in np.array_split(grid, max(1, grid.shape[0] * n // 2_000_000 + 1))])
        starts = grid[np.argsort(values, kind="stable")[:settings.n_refine]]
    best, results = None, []
    for start in starts:
        theta, value, ok = _refine(start, X, y, floor, settings, lo, hi)
        results.append(value)
        if best is None or value < best[1]:
            best = (theta, value, ok)
    results = np.array(results)
    return {"theta": best[0], "objective": best[1], "converged": best[2],
            "n_starts": len(starts),
            # how many local optimisations ended within 1e-6 (relative) of the best objective
            "n_starts_at_best": int(np.sum(results <= best[1] * (1 + 1e-6) + 1e-15))}


# ---------------------------------------------------------------------------------------------
# Fits on points


@dataclasses.dataclass
class FitResult:
    law: Law
    settings: FitSettings
    theta: np.ndarray              # centred parameters
    log_refs: np.ndarray           # log F_ref_k
    X: np.ndarray
    y: np.ndarray
    points: pd.DataFrame           # the points used (canonical columns)
    objective: float
    converged: bool
    n_starts: int
    n_starts_at_best: int

    @property
    def estimates(self) -> dict:
        return theta_to_estimates(self.theta, self.law, self.log_refs)

    @property
    def residuals(self) -> np.ndarray:
        """log L - log L_hat per point (positive: the law under-predicts)."""
        return self.y - predict_log_centred(self.theta, self.X, self.law.floor is not None)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        X = design_matrix(frame, self.law, self.settings.depth_offset, self.log_refs)
        return np.exp(predict_log_centred(self.theta, X, self.law.floor is not None))

    def parameters_at_bounds(self) -> list[str]:
        """Parameters pinned at a bound (an exponent at exponent_bounds, a vanishing term or
        floor): a sign that the points do not identify them."""
        floor = self.law.floor is not None
        lo, hi = _bounds(len(self.law.features), floor, self.y, self.settings)
        names = [n for pair in zip(self.law.coefficients, self.law.exponents) for n in pair]
        names += [self.law.floor] if floor else []
        tol = 1e-6 * np.maximum(1.0, np.abs(self.theta))
        pinned = (self.theta - lo < tol) | (hi - self.theta < tol)
        return [name for name, flag in zip(names, pinned) if flag]

    def negligible_terms(self, fraction: float = 1e-4) -> list[str]:
        """Terms (named by their coefficient, or the floor) below `fraction` of the predicted
        loss at every point: the fit switched them off, so their exponent means nothing."""
        floor = self.law.floor is not None
        z = _log_terms(self.theta, self.X, floor)
        share = np.exp(z - predict_log_centred(self.theta, self.X, floor)[:, None])
        names = list(self.law.coefficients) + ([self.law.floor] if floor else [])
        return [name for name, col in zip(names, share.T) if col.max() < fraction]

    def jacobian_standard_errors(self) -> dict:
        """Asymptotic standard errors of the exponents and floor, s^2 (J^T J)^-1 (least squares)."""
        floor = self.law.floor is not None
        r, jac = _residual_and_jacobian(self.theta, self.X, self.y, floor)
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
        if floor:  # L0 = exp(e): delta method
            out[self.law.floor] = float(np.exp(self.theta[-1]) * np.sqrt(var[-1]))
        return {k: (v if math.isfinite(v) else None) for k, v in out.items()}


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


def design_matrix(frame: pd.DataFrame, law: Law, depth_offset: float = 0.0,
                  log_refs: np.ndarray | None = None) -> np.ndarray:
    """log features (depth as l - offset), centred on `log_refs` (default: their own means)."""
    columns = []
    for feature in law.features:
        values = frame[feature].to_numpy(float)
        if feature == "depth" and depth_offset:
            values = values - depth_offset
            if (values <= 0).any():
                raise ValueError(f"depth_offset: {depth_offset} is not below every depth "
                                 f"(smallest depth {values.min() + depth_offset:g})")
        columns.append(np.log(values))
    X = np.stack(columns, axis=1)
    if log_refs is None:
        return X
    return X - log_refs


def fit_law(frame: pd.DataFrame, law: Law | str, settings: FitSettings | None = None,
            source: str = "points") -> FitResult:
    law = LAWS[law] if isinstance(law, str) else law
    settings = settings or FitSettings()
    check_points(frame, law, source)
    if len(frame) < law.n_parameters:
        raise ValueError(f"{source}: only {len(frame)} points for the {law.n_parameters} "
                         f"parameters of the {law.name} law ({law.equation})")
    raw = design_matrix(frame, law, settings.depth_offset)
    log_refs = raw.mean(axis=0)
    X, y = raw - log_refs, np.log(frame["loss"].to_numpy(float))
    out = fit_centred(X, y, settings, floor=law.floor is not None)
    return FitResult(law, settings, out["theta"], log_refs, X, y,
                     frame.reset_index(drop=True), out["objective"], out["converged"],
                     out["n_starts"], out["n_starts_at_best"])


def fit_depth_law(frame: pd.DataFrame, settings: FitSettings | None = None,
                  source: str = "points") -> FitResult:
    """Liu et al.'s decomposed law L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0."""
    return fit_law(frame, "decomposed", settings, source)


def fit_chinchilla_law(frame: pd.DataFrame, settings: FitSettings | None = None,
                       source: str = "points") -> FitResult:
    """The reference form L = E + A/N^alpha + B/D^beta (Hoffmann et al.; Besiroglu et al.)."""
    return fit_law(frame, "reference", settings, source)


# ---------------------------------------------------------------------------------------------
# Bootstrap and held-out validation


def resample_indices(rng: np.random.Generator, n: int, groups: np.ndarray | None) -> np.ndarray:
    """Indices of one bootstrap sample: points with replacement, or whole groups with replacement."""
    if groups is None:
        return rng.integers(0, n, size=n)
    members = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    chosen = rng.integers(0, len(members), size=len(members))
    return np.concatenate([members[g] for g in chosen])


def bootstrap(result: FitResult, resamples: int = 1000, unit: str = "points",
              confidence: float = 0.95, seed: int = 0) -> dict:
    """Refit on resampled points (or whole width-depth architectures), warm-started from the
    full fit; percentile intervals. Returns {"samples": DataFrame, "intervals": {...}}."""
    if unit not in ("points", "architectures"):
        raise ValueError(f"bootstrap.unit: '{unit}' is not points or architectures")
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap.confidence: {confidence} must be in (0, 1)")
    floor = result.law.floor is not None
    groups = architecture_ids(result.points) if unit == "architectures" else None
    rng = np.random.default_rng(seed)
    rows, failures = [], 0
    for _ in range(resamples):
        idx = resample_indices(rng, len(result.y), groups)
        try:
            out = fit_centred(result.X[idx], result.y[idx], result.settings, floor,
                              warm_start=result.theta)
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            failures += 1
            continue
        rows.append(theta_to_estimates(out["theta"], result.law, result.log_refs))
    samples = pd.DataFrame(rows, columns=list(theta_to_estimates(result.theta, result.law,
                                                                  result.log_refs)))
    tail = (1 - confidence) / 2
    intervals = {}
    for name in samples.columns:
        values = samples[name].to_numpy(float)
        values = values[np.isfinite(values)]
        if not len(values):
            continue
        intervals[name] = {"low": float(np.quantile(values, tail)),
                           "high": float(np.quantile(values, 1 - tail)),
                           "median": float(np.median(values)), "std": float(values.std(ddof=1))
                           if len(values) > 1 else 0.0}
    return {"samples": samples, "intervals": intervals, "resamples": resamples,
            "failures": failures, "unit": unit, "confidence": confidence, "seed": seed}


def _split_scores(result: FitResult, test: pd.DataFrame) -> dict:
    train_r = result.residuals
    test_r = np.log(test["loss"].to_numpy(float)) - np.log(result.predict(test))
    return {"n_train": int(len(train_r)), "n_test": int(len(test_r)),
            "rmse_log_train": float(np.sqrt(np.mean(train_r ** 2))),
            "rmse_log_test": float(np.sqrt(np.mean(test_r ** 2))),
            "mean_abs_rel_error_test": float(np.mean(np.abs(np.expm1(-test_r)))),
            "exponents": {k: result.estimates[k] for k in result.law.exponents}}


def held_out_validation(frame: pd.DataFrame, law: Law | str, settings: FitSettings,
                        random_splits: int = 5, test_fraction: float = 0.2,
                        extrapolation_train_fraction: float = 0.7, unit: str = "points",
                        seed: int = 0) -> dict:
    """Fit on part of the points, score log-loss error on the rest.

    random: `random_splits` random test sets of `test_fraction` of the points (or of the
    architectures, unit="architectures"). extrapolation: train on the smallest
    `extrapolation_train_fraction` of architectures by size (params, else l m^2), test on the
    larger ones. Splits too small to fit are reported with an "error" entry instead.
    """
    law = LAWS[law] if isinstance(law, str) else law
    frame = frame.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    groups = architecture_ids(frame) if unit == "architectures" else np.arange(len(frame))
    unique = np.unique(groups)

    def run(train_mask):
        train, test = frame[train_mask], frame[~train_mask]
        if len(test) == 0:
            return {"error": "empty test set"}
        try:
            return _split_scores(fit_law(train, law, settings), test)
        except ValueError as error:
            return {"error": str(error)}

    random = []
    for _ in range(random_splits):
        n_test = max(1, int(round(test_fraction * len(unique))))
        test_groups = rng.choice(unique, size=n_test, replace=False)
        random.append(run(~np.isin(groups, test_groups)))
    arch = architecture_ids(frame)
    size = model_size(frame)
    arch_size = np.array([size[arch == a].max() for a in np.unique(arch)])
    n_train_arch = int(math.floor(extrapolation_train_fraction * len(arch_size)))
    small = np.unique(arch)[np.argsort(arch_size, kind="stable")[:n_train_arch]]
    extrapolation = run(np.isin(arch, small))
    extrapolation["size_cut"] = float(arch_size[np.argsort(arch_size)][n_train_arch - 1]) \
        if n_train_arch else None
    ok = [s["rmse_log_test"] for s in random if "rmse_log_test" in s]
    return {"random": random, "extrapolation": extrapolation, "unit": unit,
            "mean_rmse_log_test_random": float(np.mean(ok)) if ok else None}


# ---------------------------------------------------------------------------------------------
# One configured fit, end to end


FIT_SPEC_KEYS = ("law", "source", "columns", "objective", "huber_delta", "optimizer",
                 "exponent_bounds", "start_grid", "n_refine", "depth_offset", "drop_highest",
                 "ties", "min_tokens", "bootstrap", "validation")
NESTED_SPEC_KEYS = ("start_grid", "bootstrap", "validation", "columns")


def merge_fit_spec(defaults: dict, fit: dict) -> dict:
    """`scaling.fit` defaults overridden by one `scaling.fits` entry (nested dicts merged)."""
    for where, spec in (("scaling.fit", defaults), ("scaling.fits.<name>", fit)):
        unknown = sorted(set(spec) - set(FIT_SPEC_KEYS))
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: unknown fit key "
                             f"(known: {', '.join(FIT_SPEC_KEYS)})")
    merged = {**defaults, **fit}
    for key in NESTED_SPEC_KEYS:
        if isinstance(defaults.get(key), dict) and isinstance(fit.get(key), dict):
            merged[key] = {**defaults[key], **fit[key]}
    if "law" not in merged:
        raise ValueError("scaling.fits.<name>.law: missing (decomposed or reference)")
    if merged["law"] not in LAWS:
        raise ValueError(f"law: '{merged['law']}' is not one of {', '.join(LAWS)}")
    return merged


def run_fit(frame: pd.DataFrame, spec: dict, seed: int = 0, source: str = "points") -> tuple:
    """Apply one config fit spec (law, drop_highest, ties, fit settings, bootstrap, validation)
    to points; returns (JSON-ready record, bootstrap samples frame)."""
    law = LAWS[spec["law"]]
    settings = FitSettings.from_config(spec)
    if law.name != "decomposed" and settings.depth_offset:
        raise ValueError(f"{source}: depth_offset only applies to the decomposed law")
    n_input = len(frame)
    if spec.get("min_tokens"):
        frame = frame[frame["tokens"] >= spec["min_tokens"]]
    kept = drop_highest_losses(frame, int(spec.get("drop_highest", 0)), spec.get("ties", "exact"))
    result = fit_law(kept, law, settings, source)
    boot_spec = spec.get("bootstrap") or {}
    boot = bootstrap(result, boot_spec.get("resamples", 1000), boot_spec.get("unit", "points"),
                     boot_spec.get("confidence", 0.95), seed)
    val_spec = spec.get("validation") or {}
    validation = held_out_validation(
        kept, law, settings, val_spec.get("random_splits", 5), val_spec.get("test_fraction", 0.2),
        val_spec.get("extrapolation_train_fraction", 0.7), val_spec.get("unit", "points"), seed)
    residuals = result.residuals
    points = result.points.copy()
    points["predicted"] = np.exp(result.y - residuals)
    points["residual_log"] = residuals
    record = {
        "law": law.name, "equation": law.equation, "source": source,
        "objective": settings.objective, "huber_delta": settings.huber_delta,
        "optimizer": settings.optimizer, "depth_offset": settings.depth_offset,
        "n_points_input": n_input, "n_points_used": len(result.points),
        "n_dropped": n_input - len(result.points),
        "drop_highest": int(spec.get("drop_highest", 0)), "ties": spec.get("ties", "exact"),
        "estimates": result.estimates, "intervals": boot["intervals"],
        "bootstrap": {k: boot[k] for k in ("resamples", "failures", "unit", "confidence",
                                           "seed")},
        "jacobian_standard_errors": result.jacobian_standard_errors(),
        "parameters_at_bounds": result.parameters_at_bounds(),
        "negligible_terms": result.negligible_terms(),
        "objective_value": result.objective, "converged": result.converged,
        "n_starts": result.n_starts, "n_starts_at_best": result.n_starts_at_best,
        "rmse_log": float(np.sqrt(np.mean(residuals ** 2))),
        "feature_refs": dict(zip(law.features, np.exp(result.log_refs).tolist())),
        "validation": validation,
        "points": points.to_dict(orient="records"),
    }
    return json_safe(record), boot["samples"]
