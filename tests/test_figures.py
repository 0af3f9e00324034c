"""nohair_jax.figures: which layers a per-layer figure draws, and that a 30-layer figure draws them."""

import numpy as np

from nohair_jax.fit import FitRefused
from nohair_jax.figures import drawn_layers, layer_colors, offsets_figure


def test_drawn_layers_keep_all_few_and_spread_many():
    assert drawn_layers(4) == [1, 2, 3, 4]
    many = drawn_layers(30)
    assert many[0] == 1 and many[-1] == 30 and len(many) == 8 and many == sorted(set(many))
    assert len(layer_colors(30)) == 30 and layer_colors(30)[1] != layer_colors(30)[30]


def test_offsets_figure_of_thirty_layers_has_one_outside_legend_with_the_drawn_layers():
    t = np.arange(1, 257)
    l2 = np.broadcast_to(t ** -0.7, (2, 31, 256)).copy()
    l2[:, 0] = 0
    fig = offsets_figure(t, l2, [FitRefused("none")] * 30, None)
    (legend,) = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == [f"layer {k}" for k in drawn_layers(30)]
    assert all(ax.get_legend() is None for ax in fig.axes)


def test_offsets_figure_draws_the_kl_with_its_half_life_and_tick_labels_that_do_not_collide():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from nohair_jax.fit import kl_half_life

    t = np.arange(1, 129)
    l2 = np.broadcast_to(t ** -0.7, (3, 31, 128)).copy()
    l2[:, 0] = 0
    kl = np.stack([s / t for s in (1.0, 2.0, 3.0)])
    half = kl_half_life(kl, n_boot=50).to_dict()
    fig = offsets_figure(t, l2, [FitRefused("none")] * 30, None, kl=kl, half_life=half)
    ax_win, ax_kl = fig.axes[2], fig.axes[3]
    assert ax_kl.get_ylabel() == "next-token KL, nats"
    assert any(line.get_label() == f"half of the peak: t = {half['t']:.0f}" for line in ax_kl.get_lines())
    # Without the KL, T 256: matplotlib's own labels of the window panel (2x10^0, 3x10^0, ..) overlapped.
    t = np.arange(1, 257)
    l2 = np.broadcast_to(t ** -0.7, (3, 31, 256)).copy()
    for fig in (fig, offsets_figure(t, l2, [FitRefused("none")] * 30, None)):
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        for ax in fig.axes:
            labels = [lab for lab in ax.get_xticklabels(which="both") if lab.get_visible() and lab.get_text()]
            boxes = sorted((lab.get_window_extent(renderer) for lab in labels), key=lambda b: b.x0)
            assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), [lab.get_text() for lab in labels]
