"""Every figure's matplotlib: drawn off-screen, laid out and saved one way (one resolution)."""

from __future__ import annotations

DPI = 110


def subplots(*grid: int, figsize: tuple[float, float]):
    """(figure, axes) like `plt.subplots`, on the file-only backend: no display needed, and
    matplotlib is imported only by a run that draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*grid, figsize=figsize)


def save(fig, path) -> None:
    """Lay `fig` out, write it to `path` and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
