"""Where the tests find the checkout: the chart, the values overlays, the Dockerfile, the docs."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tf-multiworker"
