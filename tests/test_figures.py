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
