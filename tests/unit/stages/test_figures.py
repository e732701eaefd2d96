"""Figures say what was measured: fixed distinct scheme colours, one colour scale across compared
heatmaps, measured values (and "at bound") in titles beside the paper's, models without an LM
head named in the logit lens rather than dropped."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from depthlab.core import figure_style  # noqa: E402
from depthlab.stages.analysis.plots import plot_angular_distance, plot_logit_lens  # noqa: E402
from depthlab.stages.depth_use.plots import plot_linear_maps  # noqa: E402
from depthlab.stages.scaling.plots import plot_scaling_fit  # noqa: E402
from depthlab.stages.toy.fit import fit_toy_exponents  # noqa: E402
from depthlab.stages.toy.plots import plot_toy  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def all_text(fig) -> str:
    """Every string drawn in a figure (titles, suptitles of subfigures, legends, annotations)."""
    return "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def summary(name, layers, lm_head=True):
    return {"model": name, "architecture": {"num_layers": layers, "has_lm_head": lm_head}}


def test_each_norm_scheme_has_its_own_colour_in_every_grouping():
    by_scheme = figure_style.scheme_colours()
    assert set(by_scheme) == set(figure_style.NORM_SCHEMES)
    # every scheme its own colour, none a hub model's, the old palette slots kept
    hub = {to_hex(figure_style._palette()[i]) for i in figure_style._HUB_INDICES}
    assert len({to_hex(c) for c in by_scheme.values()} - hub) == len(figure_style.NORM_SCHEMES)
    palette = [to_hex(c) for c in figure_style._palette()]
    old_slots = {"pre_ln": 0, "post_ln": 1, "mix_ln": 2, "lns": 3, "deepnorm": 4, "scaled_init": 5}
    assert {s: palette.index(to_hex(by_scheme[s])) for s in old_slots} == old_slots
    # the same colour whatever else shares the figure, and whatever the model is called
    facts = figure_style.model_facts(
        ["a", "b", "sw_l2_m8", "sw_l4_m8", "enc"],
        {
            "a": {"kind": "pretrain", "norm_scheme": "lns"},
            "b": {"kind": "pretrain", "norm_scheme": "pre_ln"},
            "sw_l2_m8": {"kind": "pretrain", "norm_scheme": "pre_ln", "sweep": "sw"},
            "sw_l4_m8": {"kind": "pretrain", "norm_scheme": "pre_ln", "sweep": "sw"},
            "enc": {"kind": "hf"},
        },
    )
    colours = figure_style.colours(facts)
    assert to_hex(colours["a"]) == to_hex(by_scheme["lns"])
    assert to_hex(colours["b"]) == to_hex(by_scheme["pre_ln"])
    assert len({to_hex(c) for c in colours.values()}) == 5
    assert list(figure_style.groups(facts)) == ["norm schemes", "sweep sw", "hub models"]


def test_seed_replicates_fold_into_their_base_model():
    facts = figure_style.model_facts(
        ["pre_ln_s0", "pre_ln_s1"],
        {
            f"pre_ln_s{s}": {
                "kind": "pretrain",
                "norm_scheme": "pre_ln",
                "seed": s,
                "seed_group": "pre_ln",
            }
            for s in (0, 1)
        },
    )
    assert figure_style.seed_counts(facts) == {"pre_ln": 2}
    assert list(figure_style.colours(facts)) == ["pre_ln"]


def angular_frame(name, layers, scale):
    rows = [
        {
            "model": name,
            "measure": "angular_distance_last",
            "layer": l,
            "n": n,
            "value": scale * n / layers,
            "count": 8,
        }
        for l in range(layers)
        for n in range(1, layers - l + 1)
    ]
    return pd.DataFrame(rows)


def test_angular_distance_heatmaps_share_one_colour_scale():
    frame = pd.concat(
        [
            angular_frame("pre_ln", 4, 0.2),
            angular_frame("lns", 4, 0.6),
            angular_frame("sw_l2_m8", 2, 0.4),
        ]
    )
    summaries = {
        "pre_ln": summary("pre_ln", 4),
        "lns": summary("lns", 4),
        "sw_l2_m8": summary("sw_l2_m8", 2),
    }
    fig = plot_angular_distance(frame, summaries)
    images = [im for ax in fig.findobj(matplotlib.axes.Axes) for im in ax.get_images()]
    assert len(images) == 3
    # largest planted distance: lns, n = L = 4, 0.6 * 4 / 4
    assert [(im.norm.vmin, im.norm.vmax) for im in images] == [(0.0, pytest.approx(0.6))] * 3


def test_linear_map_error_matrices_share_one_colour_scale():
    rows, summaries = [], {}
    for pair, worst in (("p1", 0.5), ("p2", 2.0)):
        summaries[pair] = {
            "source_layers": 2,
            "target_layers": 3,
            "source": "a",
            "target": "b",
            "tokens": {"test": 10},
        }
        for i in range(3):
            for j in range(4):
                rows.append(
                    {
                        "pair": pair,
                        "source_layer": i,
                        "target_layer": j,
                        "relative_error": 0.1 + worst * (i == 0 and j == 0),
                    }
                )
    fig = plot_linear_maps(pd.DataFrame(rows), summaries)
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert [(im.norm.vmin, im.norm.vmax) for im in images] == [
        (pytest.approx(0.1), pytest.approx(2.1))
    ] * 2


def test_logit_lens_names_a_model_without_lm_head_instead_of_dropping_it():
    rows = [
        {"model": "pre_ln", "measure": m, "layer": l, "n": np.nan, "value": 0.5, "count": 4}
        for m in ("logit_lens_kl", "logit_lens_top5")
        for l in range(3)
    ]
    rows += [
        {"model": "encoder", "measure": "h_norm", "layer": l, "n": np.nan, "value": 1.0, "count": 4}
        for l in range(3)
    ]
    summaries = {"pre_ln": summary("pre_ln", 3), "encoder": summary("encoder", 3, False)}
    facts = {"pre_ln": {"kind": "pretrain", "norm_scheme": "pre_ln"}, "encoder": {"kind": "hf"}}
    text = all_text(plot_logit_lens(pd.DataFrame(rows), summaries, facts))
    assert "encoder (no LM head: no logit lens)" in text  # legend entry
    assert "encoder: no LM head: no logit lens" in text  # in the panels


def decomposed_record(a_l, at_bound):
    """A decomposed-law fit record whose points lie on the law (planted estimates)."""
    est = {"c_m": 2.0, "a_m": 1.0, "c_l": 0.5, "a_l": a_l, "c_D": 30.0, "a_D": 0.3, "L0": 1.5}
    est.update({f"log_{c}": np.log(est[c]) for c in ("c_m", "c_l", "c_D")})
    points = []
    for width in (32, 64):
        for depth in (2, 4, 8):
            for tokens in (1e4, 1e5):
                loss = (
                    est["c_m"] / width ** est["a_m"]
                    + est["c_l"] / depth**a_l
                    + est["c_D"] / tokens ** est["a_D"]
                    + est["L0"]
                )
                points.append(
                    {
                        "width": width,
                        "depth": depth,
                        "tokens": tokens,
                        "loss": loss,
                        "predicted": loss,
                        "residual_log": 0.0,
                    }
                )
    intervals = {
        name: {"low": 0.9 * est[name], "high": min(1.1 * est[name], 5.0)}
        for name in ("a_m", "a_l", "a_D")
    }
    return {
        "law": "decomposed",
        "estimates": est,
        "points": points,
        "feature_refs": {"width": 45.0, "depth": 4.0, "tokens": 3e4},
        "intervals": intervals,
        "objective": "least_squares",
        "n_points_used": 12,
        "rmse_log": 0.0,
        "parameters_at_bounds": ["a_l"] if at_bound else [],
        "bootstrap": {"resamples": 3, "unit": "points", "confidence": 0.95},
    }


def test_scaling_title_states_the_measurement_beside_the_paper():
    record = decomposed_record(1.37, at_bound=False)
    samples = pd.DataFrame({"a_l": [1.3, 1.37, 1.45]})
    fig = plot_scaling_fit(
        record, samples, "fitname", published={"a_l": (1.2, 0.3, "Liu et al. 2026")}
    )
    title = fig._suptitle.get_text()
    assert "Reproduces" not in all_text(fig)
    assert "a_l = 1.37 [1.23, 1.51]" in title
    assert "a_l = 1.2 ± 0.3" in title and "at bound" not in title
    assert any(text.startswith("paper") for text in all_text(fig).splitlines())


def test_scaling_estimate_at_its_bound_is_labelled():
    record = decomposed_record(5.0, at_bound=True)
    fig = plot_scaling_fit(record, pd.DataFrame({"a_l": [5.0, 5.0, 0.0]}), "sweep")
    assert "a_l = 5 [4.5, 5] (at bound)" in fig._suptitle.get_text()
    assert "a_m = 1 [0.9, 1.1];" in fig._suptitle.get_text()  # not at a bound: no label


def planted_toy_losses(exponents: dict, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for kind, a in exponents.items():
        for depth in (2, 4, 8, 16):
            loss = 0.5 * depth**-a * np.exp(rng.normal(0, noise))
            rows.append(
                {
                    "teacher_kind": kind,
                    "replicate": 0,
                    "temperature": 1.0,
                    "student_depth": depth,
                    "test_loss": loss,
                }
            )
    return pd.DataFrame(rows)


def test_toy_title_claims_the_paper_exponent_only_where_measured():
    losses = planted_toy_losses({"independent": 0.3, "tied": 3.0})
    fits = fit_toy_exponents(losses)
    measured = {f["teacher_kind"]: f["a"] for f in fits}
    assert measured["tied"] == pytest.approx(3.0, abs=0.1)
    fig = plot_toy(
        losses, fits, {}, published={"independent": (1.0, "paper"), "tied": (3.0, "paper")}
    )
    titles = {ax.get_title().split(" teacher")[0]: ax.get_title() for ax in fig.axes}
    text = all_text(fig)
    assert "Reproduces" not in text
    assert "consistent with paper a = 3 at T = 1" in titles["tied"]
    assert (
        f"paper a = 1 (converged) not reached: measured a = {measured['independent']:.2f}"
    ) in titles["independent"]
    assert f"T = 1: a = {measured['tied']:.2f} ±" in text


def test_toy_figure_shows_the_spread_of_per_replicate_exponents():
    losses = planted_toy_losses({"tied": 2.0})
    fits = fit_toy_exponents(losses)
    fits[0]["replicates"] = [{"a": 1.8}, {"a": 2.2}]
    fig = plot_toy(losses, fits, {}, published={}, protocol={"steps": 400})
    text = all_text(fig)
    assert "replicates 1.80 to 2.20" in text
    assert "protocol: steps 400" in text


def test_loss_curves_keep_equal_schemes_apart_by_line_style():
    from depthlab.stages.pretrain.plots import plot_loss_curves

    tokens = [0, 100, 200]
    runs = pd.DataFrame(
        [
            {"model": m, "split": "val", "step": t, "tokens": t, "loss": loss, "sweep": ""}
            for m, losses in {
                "post_ln": [8.0, 6.5, 6.5],
                "deepnorm": [8.0, 6.5, 6.5],  # equal to post_ln: drawn on top of it
                "lns": [8.0, 5.0, 4.5],
            }.items()
            for t, loss in zip(tokens, losses)
        ]
    )
    fig = plot_loss_curves(runs)
    drawn = {}
    for line in fig.axes[0].get_lines():
        if len(line.get_xdata()) == len(tokens):
            drawn[tuple(line.get_ydata())] = drawn.get(tuple(line.get_ydata()), []) + [line]
    equal = drawn[(8.0, 6.5, 6.5)]
    assert len(equal) == 2
    styles = {(line.get_linestyle(), line.get_marker()) for line in equal}
    assert len(styles) == 2, "post_ln and deepnorm must differ in dashes or markers"


def depth_score_tables(family):
    scores = pd.DataFrame(
        [
            {"model": "m", "family": family, "level": k, "depth_score": 1.0 + 0.1 * k}
            | {"ci_low": 0.9 + 0.1 * k, "ci_high": 1.1 + 0.1 * k}
            for k in (1, 2, 3)
        ]
    )
    accuracy = pd.DataFrame(
        [
            {"model": "m", "family": family, "level": k, "accuracy": 1.0 / k, "chance": 0.1}
            for k in (1, 2, 3)
        ]
    )
    return scores, accuracy, {"m": summary("m", 4)}


@pytest.mark.parametrize(
    "family, named, absent",
    [("hops", "synthetic k-hop lookups: hops", "MATH: levels"), ("math", "MATH: levels", "k-hop")],
)
def test_depth_score_title_names_the_family_that_was_scored(family, named, absent):
    from depthlab.stages.depth_use.plots import plot_depth_score

    title = plot_depth_score(*depth_score_tables(family))._suptitle.get_text()
    measured = title.split(" - ")[0]
    assert named in measured and absent not in measured


def test_pruning_sweep_draws_gromovs_half_depth_reference():
    from depthlab.core.paper_values import PAPER_VALUES
    from depthlab.stages.pruning.plots import plot_sweep

    sweep = pd.DataFrame(
        [
            {"model": "m", "strategy": "angular", "healed": False, "n": n, "fraction": n / 4}
            | {"val_loss": 5.0 + n, "task": "t", "acc": 0.8 - 0.1 * n, "acc_stderr": 0.01}
            for n in (1, 2, 3)
        ]
    )
    fig = plot_sweep(sweep, {"m": "m"}, "acc", "test", chance=0.25)
    task_axis = fig.axes[1]
    vertical = [
        line.get_xdata()[0]
        for line in task_axis.get_lines()
        if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2
    ]
    assert vertical == [PAPER_VALUES["gromov_robust_fraction"].value]
    assert "Gromov et al." in fig._suptitle.get_text()


def two_model_sweep():
    """A toy model near loss 6.5 whose block removal costs 0.06, beside a pretrained LM near 3
    whose removal costs 10; the LM has no lm-eval score (its harness was not run)."""
    rows = []
    for n in (1, 2, 3):
        rows.append(
            {"model": "toy", "strategy": "angular", "healed": False, "n": n, "fraction": n / 4}
            | {"val_loss": 6.5 + 0.02 * n, "task": "t", "acc": 0.3, "acc_stderr": 0.01}
        )
        rows.append(
            {"model": "lm", "strategy": "angular", "healed": False, "n": n, "fraction": n / 30}
            | {"val_loss": 3.0 + 5 * n, "task": "t", "acc": np.nan, "acc_stderr": np.nan}
        )
    return pd.DataFrame(rows)


def test_pruning_sweep_gives_each_model_its_own_loss_axis_so_a_small_effect_shows():
    """Before, the loss column shared one y-axis (3 to 18 here): the toy model's 0.04 rise was a
    flat line. Now each panel scales to its own model."""
    from depthlab.stages.pruning.plots import plot_sweep

    fig = plot_sweep(two_model_sweep(), {"toy": "toy", "lm": "lm"}, "acc", "test")
    toy_loss_axis = fig.axes[0]
    low, high = toy_loss_axis.get_ylim()
    assert high - low < 0.2  # the 0.04 rise spans a visible part of the axis
    assert fig.axes[2].get_ylim()[1] > 15  # the LM's row keeps its own scale


def test_pruning_sweep_says_not_measured_and_keeps_its_title_clear_of_the_panels():
    from depthlab.stages.pruning.plots import plot_sweep

    fig = plot_sweep(two_model_sweep(), {"toy": "toy", "lm": "lm"}, "acc", "test")
    lm_task_axis = fig.axes[3]
    assert "t: not measured\nfor lm" in [t.get_text() for t in lm_task_axis.texts]
    assert not [t for t in fig.axes[1].texts if "not measured" in t.get_text()]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title_bottom = fig._suptitle.get_window_extent(renderer).y0
    top_row_top = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes[:2])
    assert title_bottom >= top_row_top  # before: the two-line title overlapped the tick labels


def test_seed_replicates_have_one_legend_entry_per_scheme():
    """variance_growth drew one legend entry per seed (three 'pre_ln (mean of 3 seeds...)')."""
    from depthlab.stages.analysis.plots import plot_variance_growth

    names = [f"pre_ln_s{s}" for s in range(3)] + ["lns"]
    rows = [
        {"model": name, "measure": m, "layer": l, "n": np.nan, "value": 1.0 + l, "count": 4}
        for name in names
        for m in ("h_var", "h_norm", "h_mean")
        for l in range(3)
    ]
    facts = {
        f"pre_ln_s{s}": {"kind": "pretrain", "norm_scheme": "pre_ln", "seed": s}
        | {"seed_group": "pre_ln"}
        for s in range(3)
    } | {"lns": {"kind": "pretrain", "norm_scheme": "lns"}}
    fig = plot_variance_growth(pd.DataFrame(rows), {n: summary(n, 3) for n in names}, facts)
    labels = [
        t.get_text() for legend in fig.findobj(matplotlib.legend.Legend) for t in legend.texts
    ]
    assert labels == ["pre_ln (mean of 3 seeds, band: range)", "lns"]
