"""What the plot scripts share: a figure saved as a PNG whole or not at all."""
import os

import matplotlib.pyplot as plt


def save(fig, path, dpi):
    """Writes `fig` to `path` through a temporary file in the same folder, then closes it: a crash
    never leaves half a PNG."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
