"""What the plot scripts share: a figure saved as a PNG whole or not at all."""
import os

import matplotlib.pyplot as plt

from script_support import BadInput


def save(fig, path, dpi):
    """Writes `fig` to `path` through a temporary file in the same folder, then closes it: a crash
    never leaves half a PNG, and a failure leaves no temporary and names `path`."""
    try:
        if path.is_dir():
            raise BadInput(f"{path}: is a folder; expected the PNG file to write there (move the folder away)")
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.png")
        try:
            fig.savefig(tmp, dpi=dpi)
            os.replace(tmp, path)
        except BaseException as e:
            tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise OSError(e.errno, e.strerror or str(e), str(path)) from e
            raise
    finally:
        plt.close(fig)
