#!/usr/bin/env python3
"""Get CIFAR-10 into one data root, in a form `train` reads.

  get-data.sh [--root datasets/cifar10]              download the official binary tarball
  get-data.sh --from cifar-10-binary.tar.gz          use a local copy of it
  get-data.sh --from cifar10-jpeg.tar.gz             a JPEG tarball <top>/{train,test}/<class>/*.jpg
  get-data.sh --from /path/to/folder                 a folder with cifar-10-batches-bin/ or train/ test/
  get-data.sh --from ... --to-binary                 also convert image folders to binary batches
                                                     (needs numpy + Pillow; for builds without OpenCV)

Afterwards the root holds cifar-10-batches-bin/*.bin or train/ and test/ image folders. The root
is filled only when everything succeeded (work happens in a temporary folder beside it).
Exit codes: 0 ok (or already present), 2 bad input / no network and no local copy.
"""
import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import script_support

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
BIN_DIR = "cifar-10-batches-bin"
RECORD_BYTES = 1 + 3 * 32 * 32
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp"}


class Refused(Exception):
    """A problem the user can fix; main() prints it on one line and exits with 2."""


def md5_of(path):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def has_data(root):
    return (root / BIN_DIR / "test_batch.bin").exists() or (root / "train").is_dir()


def safe_extract(archive, destination):
    """Extracts a tarball, refusing members that would land outside `destination`."""
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (destination / member.name).resolve()
                if not str(target).startswith(str(destination.resolve())) or member.issym() or member.islnk():
                    raise Refused(f"{archive}: unsafe member '{member.name}' in archive")
            tar.extractall(destination)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise Refused(f"{archive}: not a readable tar archive ({e})")


def find_layout(folder):
    """Returns ('binary', dir_with_bins) or ('images', dir_with_train_test) inside folder."""
    candidates = [folder] + sorted(p for p in folder.rglob("*") if p.is_dir())
    for c in candidates:
        if (c / "test_batch.bin").exists() or (c / "data_batch_1.bin").exists():
            return "binary", c
    for c in candidates:
        if (c / "train").is_dir() and (c / "test").is_dir():
            return "images", c
    raise Refused(f"{folder}: holds neither CIFAR-10 binary batches (data_batch_1.bin ...) "
                  "nor image folders train/<class>/ and test/<class>/")


def download(destination):
    target = destination / "cifar-10-binary.tar.gz"
    print(f"downloading {URL} ...", flush=True)
    try:
        with urllib.request.urlopen(URL, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as e:
        raise Refused(
            f"could not download {URL} ({e}). Without network: get cifar-10-binary.tar.gz "
            f"(md5 {MD5}) on another machine, copy it here and run "
            "`scripts/get-data.sh --from /path/to/cifar-10-binary.tar.gz` (a JPEG tarball or a "
            "folder laid out train/<class>/*.jpg, test/<class>/*.jpg works too)")
    return target


def class_folders(split_dir):
    """A split's class folders, sorted: a class's label is its position (as in train's reader)."""
    return sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def convert_to_binary(image_root, out_dir):
    """Writes image folders as official-format batches, in the round-robin class order that the
    C++ image-folder reader uses, so the first N records are the same N images either way."""
    try:
        import numpy as np
        from PIL import Image
    except ImportError as e:
        raise Refused(f"--to-binary needs numpy and Pillow ({e}); run scripts/setup.sh first")
    out_dir.mkdir(parents=True, exist_ok=True)
    class_lists = {split: class_folders(image_root / split) for split in ("train", "test")}
    if class_lists["train"] != class_lists["test"]:
        train, test = set(class_lists["train"]), set(class_lists["test"])
        differences = "; ".join(part for part in (
            "missing " + ", ".join(f"'{c}'" for c in sorted(train - test)) if train - test else "",
            "extra " + ", ".join(f"'{c}'" for c in sorted(test - train)) if test - train else "") if part)
        raise Refused(f"{image_root / 'test'}: its class folders differ from {image_root / 'train'}'s "
                      f"({differences}); a class's label is its folder's position, so every later label "
                      "would shift")
    for split, names in (("train", [f"data_batch_{i}.bin" for i in range(1, 6)]),
                         ("test", ["test_batch.bin"])):
        split_dir = image_root / split
        classes = class_lists[split]
        if len(classes) > 10:
            raise Refused(f"{split_dir}: {len(classes)} classes; the binary format holds labels 0..9")
        per_class = [sorted(f for f in (split_dir / c).iterdir()
                            if f.suffix.lower() in IMAGE_SUFFIXES) for c in classes]
        order = []
        for i in range(max(len(files) for files in per_class)):
            order += [(files[i], label) for label, files in enumerate(per_class) if i < len(files)]
        records = np.empty((len(order), RECORD_BYTES), dtype=np.uint8)
        for n, (path, label) in enumerate(order):
            try:
                image = np.asarray(Image.open(path).convert("RGB"))
            except OSError as e:
                raise Refused(f"{path}: not a decodable image ({e})")
            if image.shape != (32, 32, 3):
                raise Refused(f"{path}: image is {image.shape[1]}x{image.shape[0]}, expected 32x32")
            records[n, 0] = label
            records[n, 1:] = image.transpose(2, 0, 1).reshape(-1)
        for name, chunk in zip(names, np.array_split(records, len(names))):
            chunk.tofile(out_dir / name)
        print(f"{split}: {len(order)} images -> {', '.join(names)}")


def fill(root, source, to_binary, work):
    """Puts CIFAR-10 from `source` (a tarball, a folder, or None = download) into work/result."""
    if source is None:
        source = download(work)
    source = Path(source)
    # Extracted files can be moved into place; a user's own folder must be copied.
    place = shutil.copytree
    if source.is_file():
        if source.name == "cifar-10-binary.tar.gz":
            digest = md5_of(source)
            if digest != MD5:
                raise Refused(f"{source}: md5 {digest} does not match the official {MD5} "
                              "(incomplete or altered download)")
        extracted = work / "extracted"
        extracted.mkdir()
        safe_extract(source, extracted)
        source = extracted
        place = shutil.move
    elif not source.is_dir():
        raise Refused(f"{source}: no such file or folder")

    kind, found = find_layout(source)
    result = work / "result"
    if kind == "binary":
        result.mkdir()
        place(found, result / BIN_DIR)
    elif to_binary:
        convert_to_binary(found, result / BIN_DIR)
    else:
        result.mkdir()
        for split in ("train", "test"):
            place(found / split, result / split)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="datasets/cifar10", help="data root (data.root in the config)")
    parser.add_argument("--from", dest="source", help="local tarball or folder instead of downloading")
    parser.add_argument("--to-binary", action="store_true", help="store image folders as binary batches")
    parser.add_argument("--force", action="store_true", help="replace data already in the root")
    args = parser.parse_args(argv)
    root = Path(args.root)
    try:
        if root.exists() and not root.is_dir():
            raise Refused(f"--root: {root}: is a file, expected a folder (data.root in the config)")
        if has_data(root) and not args.force:
            print(f"{root}: CIFAR-10 already present (use --force to replace it)")
            return 0
        root.parent.mkdir(parents=True, exist_ok=True)
        converting_in_place = args.source is not None and Path(args.source).resolve() == root.resolve()
        with tempfile.TemporaryDirectory(prefix=".get-data-", dir=root.parent) as work:
            result = fill(root, args.source, args.to_binary, Path(work))
            # What the result replaces; a root converted in place keeps its image folders.
            for name in (BIN_DIR,) if converting_in_place else (BIN_DIR, "train", "test"):
                if (root / name).exists():
                    shutil.rmtree(root / name)
            root.mkdir(parents=True, exist_ok=True)
            for entry in result.iterdir():
                os.replace(entry, root / entry.name)
        print(f"{root}: CIFAR-10 ready ({', '.join(sorted(p.name for p in root.iterdir()))})")
        return 0
    except Refused as e:
        print(f"get-data: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(script_support.run("get-data", main))
