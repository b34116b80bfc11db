"""Figures show what their captions claim: y-axes that one spike does not flatten, every listed method drawn in its
own fixed colour and line style, one font, no empty panels, and a shortened run not titled with the paper's claim."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from harness.report import figures  # noqa: E402
from harness.report.load import load_runs  # noqa: E402
from harness.report.specs import FIGURES, TABLES, Figure, Panel, by_algorithm, label, section4  # noqa: E402
from harness.report.synthetic import learning_curves, make_config, write_run  # noqa: E402
from harness.report.tables import Report  # noqa: E402

DEMO = ("tpo", "dg", "grpo", "pg")


def _report(root) -> Report:
    return Report(*load_runs([root]), resamples=100)


def _tabular(root, seeds: int = 20, steps: int = 150, misalignment: bool = True, short: tuple[str, ...] = DEMO):
    """demo_tabular runs of the single-context bandit, at the preset's budget (20 seeds × 150 steps) by default;
    ``seeds`` and ``steps`` apply to the ``short`` algorithms', the others' are the budget."""
    rng = np.random.default_rng(0)
    for algorithm in DEMO:
        n, length = (seeds, steps) if algorithm in short else (20, 150)
        values = {"error": learning_curves(rng, n, length, 0.9, 0.01, 0.03)}
        values["misalignment"] = values["error"] / 2 if misalignment else np.full((n, length), np.nan)
        write_run(root / algorithm, make_config("demo_tabular", "tabular_single", algorithm, n, length), values)
    return _report(root)


def _draw(figure: Figure, report: Report) -> tuple[plt.Figure, figures.Drawer]:
    drawer = figures.Drawer(report)
    fig = drawer.draw(figure)
    assert fig is not None
    return fig, drawer


def _lines(fig: plt.Figure) -> dict[str, list]:
    """Legend label → the main lines drawn with it, over every visible panel."""
    found: dict[str, list] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if ax.get_visible() and not line.get_label().startswith("_"):
                found.setdefault(line.get_label(), []).append(line)
    return found


def test_robust_ylim_ignores_a_single_spike_but_keeps_the_bulk_a_sustained_start_and_a_wide_band():
    rng = np.random.default_rng(0)
    bulk = rng.uniform(0.0, 1.0, 2000)
    spiky = bulk.copy()
    spiky[700] = 100.0
    bottom, top = figures.robust_ylim([bulk, spiky])
    assert 0.99 <= top < 2.0 and bottom <= 0.01
    assert figures.robust_ylim([bulk]) == (bulk.min(), bulk.max())  # nothing to cut: the data's own range
    decay = 4 * np.exp(-np.arange(2000) / 300)  # a learning curve's start is no spike
    assert figures.robust_ylim([decay, bulk])[1] == 4.0
    wide = np.full(2000, -0.5)  # a band that wide all along (few seeds) is kept, one of its spikes is not
    wide[900] = -50.0
    assert -0.8 < figures.robust_ylim([bulk], [wide])[0] < -0.5  # with its headroom


def test_a_panel_stretched_by_one_spike_is_cut_to_its_bulk_and_the_caption_says_so(tmp_path):
    rng = np.random.default_rng(1)
    for algorithm in ("tpo", "grpo"):
        norms = rng.uniform(0.0, 1.0, (3, 400))
        if algorithm == "grpo":
            norms[0, 200] = 500.0
        write_run(tmp_path / algorithm, make_config("demo_tabular", "tabular_single", algorithm, 3, 400),
                  {"error": norms / 10, "grad_norm": norms})
    figure = Figure("norms", "Gradient norms", (Panel("demo_tabular", by_algorithm("tpo", "grpo"),
                                                      title="(a) Norm", metrics=("grad_norm",)),))
    fig, drawer = _draw(figure, _report(tmp_path))
    assert 1.0 < fig.axes[0].get_ylim()[1] < 10.0
    assert "cut off: GRPO (up to 167 at step 200)" in " ".join(figures.human_caption(figure, drawer,
                                                                                      drawer.report.runs))
    plt.close(fig)


def test_every_listed_algorithm_has_a_line_in_every_panel_and_the_legend(tmp_path):
    figure = FIGURES["demo_tabular_single"]
    fig, _ = _draw(figure, _tabular(tmp_path))
    names = [label({"algorithm.name": name}) for name in DEMO]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(figure.panels)
    for ax in panels:
        assert [line.get_label() for line in ax.get_lines()] == names
    assert [text.get_text() for text in fig.legends[0].get_texts()] == names
    plt.close(fig)


def test_fig14_draws_or_names_every_method_of_its_table():
    """The table beside Fig 14 lists six methods; the figure draws the paper's three and its caption says why not
    the others."""
    drawn = {series.label or label(series.key) for panel in FIGURES["fig14"].panels for series in panel.series}
    for row in TABLES["fig14"].rows:
        name = label({"algorithm.name": row["algorithm.name"]})
        assert any(name in text for text in drawn) or name in FIGURES["fig14"].caption, name
    assert drawn == {series.label for series in section4("tpo", "tpo_1ep", "dg")}


def test_an_algorithm_keeps_its_colour_across_figures_and_no_two_in_a_figure_look_alike(tmp_path):
    report = _tabular(tmp_path)
    first = _lines(_draw(FIGURES["demo_tabular_single"], report)[0])
    other = Figure("other", "Two methods, other order", (Panel("demo_tabular", by_algorithm("grpo", "tpo"),
                                                               metrics=("misalignment",)),))
    second = _lines(_draw(other, report)[0])
    assert set(second) == {"GRPO", "TPO"}
    for name, lines in second.items():
        assert lines[0].get_color() == first[name][0].get_color()
        assert lines[0].get_linestyle() == first[name][0].get_linestyle()
    looks = {(lines[0].get_color(), lines[0].get_linestyle()) for lines in first.values()}
    assert len(looks) == len(first) == len(DEMO)
    plt.close("all")
    for figure in FIGURES.values():  # every figure, from its spec: two lines differ in colour or line style,
        for panel in figure.panels:  # two methods in colour (TPO (1 ep) is TPO's colour, dotted)
            styles = [figures.series_style(s, i, len(panel.series)) for i, s in enumerate(panel.series)]
            assert len(set(styles)) == len(styles), (figure.name, panel.title)
            colours = {s.key.get("algorithm.name"): style[0] for s, style in zip(panel.series, styles)}
            assert len(set(colours.values())) == len(colours), (figure.name, panel.title)


def test_the_legend_is_in_the_axes_font_whatever_the_default(tmp_path):
    report = _tabular(tmp_path)
    with plt.rc_context({"font.family": "serif"}):
        fig, _ = _draw(FIGURES["demo_tabular_single"], report)
    ax = fig.axes[0]
    legend = fig.legends[0].get_texts()[0]
    assert legend.get_fontfamily() == ax.xaxis.label.get_fontfamily() == ax.title.get_fontfamily() \
        == [figures.STYLE["font.family"]]
    assert legend.get_fontname() == ax.yaxis.label.get_fontname() == "DejaVu Sans"
    plt.close(fig)


def test_a_panel_whose_runs_log_no_value_is_left_out_and_the_caption_names_what_is_missing(tmp_path):
    report = _tabular(tmp_path, misalignment=False)
    figure = FIGURES["demo_tabular_single"]
    fig, drawer = _draw(figure, report)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == ["(a) Error"]
    assert len(fig.axes) == 1  # the figure shrinks instead of keeping an empty panel
    caption = " ".join(figures.human_caption(figure, drawer, report.runs))
    assert "(b) Misalignment to the PG oracle (no misalignment)" in caption and "no error" not in caption
    plt.close(fig)


@pytest.mark.parametrize("seeds, steps, short, shortened", [
    (2, 150, DEMO, True), (20, 100, DEMO, True), (20, 150, DEMO, False),
    (2, 150, ("grpo",), False)])  # one partial line among full ones: marked †, the figure keeps its title
def test_a_run_short_of_its_presets_budget_is_titled_as_shortened(tmp_path, seeds, steps, short, shortened):
    figure = FIGURES["demo_tabular_single"]
    fig, drawer = _draw(figure, _tabular(tmp_path, seeds, steps, short=short))
    title = fig.get_suptitle().replace("\n", " ")
    if shortened:
        assert title == (f"demo_tabular_single: demo_tabular (shortened: {steps:,} of 150 steps, {seeds} of 20 "
                         "seeds)")
    else:
        assert title == figure.title
    plt.close(fig)


def test_a_shortened_mnist_run_drops_the_empty_mechanism_panel_and_the_papers_claim(tmp_path):
    """200 of fig4_mnist's 10,000 steps: error logged at step 0, the mechanism (at step 2,000) never."""
    for algorithm in ("tpo", "dg", "grpo"):
        values = {"error": np.array([[0.3], [0.2]]),
                  **{metric: np.full((2, 1), np.nan) for metric in figures.MECHANISM_METRICS}}
        write_run(tmp_path / algorithm, make_config("fig4_mnist", "mnist_bandit", algorithm, 2, 200), values,
                  steps=np.array([0]))
    report = _report(tmp_path)
    for name in ("fig1", "fig4"):
        fig, drawer = _draw(FIGURES[name], report)
        title = fig.get_suptitle().replace("\n", " ")
        assert title == f"{name}: fig4_mnist (shortened: 200 of 10,000 steps, 2 of 20 seeds)"
        assert len(fig.axes) == 1 and fig.axes[0].get_xlim()[1] == 200
        caption = " ".join(figures.human_caption(FIGURES[name], drawer, report.runs))
        assert FIGURES[name].title not in caption and "no error" not in caption
        plt.close(fig)
    assert "(b) Surplus gain at step 2,000 (no mech_surplus_bin0–3 at step 2,000)" in caption
