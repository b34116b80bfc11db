"""Okabe & Ito's colour-blind-safe palette, less its yellow (too pale on white): the colours of every figure. An
algorithm's look (colour, line style, marker) is declared with its class (``algorithms.library``)."""

VERMILLION, ORANGE, SKY_BLUE, GREEN, BLUE, PURPLE, BLACK = (
    "#D55E00", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#CC79A7", "#000000")
GREY = "#7F7F7F"  # an algorithm that declares no look (a scorecard's candidate)
