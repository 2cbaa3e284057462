#!/usr/bin/env python3
"""Get CIFAR-10 into one data root, in a form `train` reads.

  get-data.sh [--root datasets/cifar10]              download the official binary tarball
  get-data.sh --from cifar-10-binary.tar.gz          use a local copy of it
  get-data.sh --from cifar10-jpeg.tar.gz             a JPEG tarball <top>/{train,test}/<class>/*.jpg
  get-data.sh --from /path/to/folder                 a folder with cifar-10-batches-bin/ or train/ test/
  get-data.sh --from ... --to-binary                 also convert image folders to binary batches,
                                                     with `train convert` (train's own listing and
                                                     decoder; --train names the binary, default
                                                     $BUILD_DIR/train or build/train)
  get-data.sh --from ... --to-binary --decode-with-pillow
                                                     where train has no OpenCV: train's listing
                                                     (`train convert --list`), Pillow's decoder
                                                     (numpy + Pillow; 8-bit images only)

Where CIFAR-10 is looked for, and nowhere else: in the --from folder, or in a tarball's root or
its one top folder, either binary batches (data_batch_1..5.bin and test_batch.bin, there or in its
cifar-10-batches-bin/) or image folders train/ and test/; binary batches first.

Afterwards the root holds cifar-10-batches-bin/ or train/ and test/, and .get-data.json listing
what get-data installed there (the "ready" line names the source). The root is filled only when
everything succeeded (work happens in a temporary folder beside it). get-data replaces only what
it installed itself: a cifar-10-batches-bin/, train/ or test/ it did not write (or that changed
since) is refused in one line naming it, unless --force, which replaces the entries this install
writes, whoever wrote them, and nothing else.
Exit codes: 0 ok (or already present), 2 bad input / no network and no local copy.
"""
import argparse
import errno
import hashlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
import urllib.request
from pathlib import Path

import script_support

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
BIN_DIR = "cifar-10-batches-bin"
BIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
BIN_EXTRAS = ["batches.meta.txt"]  # copied along when present
MANIFEST = ".get-data.json"
RECORD_BYTES = 1 + 3 * 32 * 32
# Pillow modes whose 8-bit pixels Pillow's RGB conversion and OpenCV's IMREAD_COLOR agree on
# (alpha dropped, grey replicated, a palette looked up); anything else (16-bit, CMYK, ...) is refused.
PILLOW_MODES = {"RGB", "RGBA", "L", "LA", "P"}
# Formats both decode (OpenCV's imgcodecs reads no GIF, ICO, PCX or TGA: train refuses them).
PILLOW_FORMATS = {"JPEG", "PNG", "BMP", "TIFF", "WEBP", "PPM"}
EXIF_ORIENTATION = 0x0112  # OpenCV turns the image as this tag says; Pillow does not

Refused = script_support.BadInput  # a problem the user can fix: one line, exit 2
# A full disk, a quota, a file-size limit, a read-only file system: the destination's errors,
# never the source's (main names the root).
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def md5_of(path):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def has_data(root):
    return (root / BIN_DIR / "test_batch.bin").exists() or (root / "train").is_dir()


def join(base, name):
    return f"{base}/{name}" if base else name


class Folder:
    """A folder given with --from: CIFAR-10 is looked for in it, not below."""
    bases = [""]
    extracts = False

    def __init__(self, path):
        self.path = path

    def is_file(self, rel):
        return (self.path / rel).is_file()

    def is_dir(self, rel):
        return (self.path / rel).is_dir()

    def origin(self, rel):
        return str(self.path / rel) if rel else str(self.path)

    def fetch(self, rels, work):
        return self.path


class Archive:
    """A tarball, looked into through its member list: at its root and in its one top folder."""
    extracts = True

    def __init__(self, path, label=None):
        self.path, self.label = path, label or str(path)
        try:
            with tarfile.open(path) as tar:
                self.members = tar.getmembers()
        except (tarfile.TarError, EOFError, OSError) as e:
            raise Refused(f"{path}: not a readable tar archive ({e})")
        self.files, self.dirs = set(), set()
        for member in self.members:
            name = posixpath.normpath(member.name)
            if name.startswith(("/", "../")) or name == ".." or not (member.isfile() or member.isdir()):
                raise Refused(f"{path}: unsafe member '{member.name}' in archive")
            (self.files if member.isfile() else self.dirs).add(name)
            parts = name.split("/")
            self.dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        self.dirs.discard(".")
        tops = {name.split("/")[0] for name in self.files | self.dirs}
        self.bases = [""] + sorted(tops & self.dirs if len(tops) == 1 else [])

    def is_file(self, rel):
        return rel in self.files

    def is_dir(self, rel):
        return rel in self.dirs

    def origin(self, rel):
        return f"{self.label} (its {rel}/)" if rel else self.label

    def fetch(self, rels, work):
        """Extracts the members at or under `rels` into a folder of `work`, and returns it."""
        wanted = [m for m in self.members
                  if any(n == r or n.startswith(r + "/") for r in rels for n in [posixpath.normpath(m.name)])]
        extracted = work / "extracted"
        extracted.mkdir()
        try:
            with tarfile.open(self.path) as tar:
                tar.extractall(extracted, members=wanted)
        except (tarfile.TarError, EOFError, OSError) as e:
            if isinstance(e, OSError) and e.errno in WRITE_ERRORS:
                raise
            raise Refused(f"{self.path}: not a readable tar archive ({e})")
        return extracted


def open_source(path, label=None):
    """The --from file or folder (or the downloaded tarball, said as `label`) to look into."""
    if path.is_dir():
        return Folder(path)
    if path.name == "cifar-10-binary.tar.gz":
        digest = md5_of(path)
        if digest != MD5:
            raise Refused(f"{path}: md5 {digest} does not match the official {MD5} "
                          "(incomplete or altered download)")
    return Archive(path, label)


def find_layout(tree):
    """('binary', place) or ('images', place): where in `tree` CIFAR-10 is, at the documented
    places only (see the module's docstring)."""
    partial = None
    for place in (p for base in tree.bases for p in (base, join(base, BIN_DIR))):
        present = [n for n in BIN_FILES if tree.is_file(join(place, n))]
        if len(present) == len(BIN_FILES):
            return "binary", place
        partial = partial or (present and (place, present))
    for base in tree.bases:
        if tree.is_dir(join(base, "train")) and tree.is_dir(join(base, "test")):
            return "images", base
    if partial:
        place, present = partial
        missing = [n for n in BIN_FILES if n not in present]
        raise Refused(f"{tree.origin(place)}: holds {', '.join(present)} but not {', '.join(missing)}")
    raise Refused(f"{tree.origin('')}: holds neither CIFAR-10 binary batches (data_batch_1..5.bin and "
                  f"test_batch.bin, in it or in its {BIN_DIR}/) nor image folders train/<class>/ and "
                  "test/<class>/")


def identity(path):
    """What tells a folder get-data installed from one put there since: its inode and its ctime
    (which changes when an entry is added, removed or renamed in it)."""
    info = path.lstat()
    return {"inode": info.st_ino, "ctime_ns": info.st_ctime_ns}


def installed(root):
    """The entries of `root` that get-data installed: listed in its manifest and unchanged since."""
    try:
        listed = json.loads((root / MANIFEST).read_text())["installed"]
        return {name: entry for name, entry in listed.items() if name in (BIN_DIR, "train", "test")
                and (root / name).is_dir() and identity(root / name).items() <= entry.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def contents(path):
    if path.is_symlink():
        return f"a link to {os.readlink(path)}"
    if not path.is_dir():
        return "a file"
    names = sorted(p.name for p in path.iterdir())
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return "holds " + ", ".join(names[:3]) + more if names else "empty"


def check_replaceable(root, names, force):
    """Refuses, unless --force, to replace an entry of `root` that get-data did not install."""
    ours = installed(root)
    for name in names:
        target = root / name
        if os.path.lexists(target) and name not in ours and not force:
            raise Refused(f"{target}: already there and not written by get-data ({contents(target)}); "
                          "get-data replaces only what it installed: move it away, or give --force to "
                          "replace it")


def download(destination):
    target = destination / "cifar-10-binary.tar.gz"
    print(f"downloading {URL} ...", flush=True)
    try:
        with urllib.request.urlopen(URL, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as e:
        if e.errno in WRITE_ERRORS:
            raise
        raise Refused(
            f"could not download {URL} ({e}). Without network: get cifar-10-binary.tar.gz "
            f"(md5 {MD5}) on another machine, copy it here and run "
            "`scripts/get-data.sh --from /path/to/cifar-10-binary.tar.gz` (a JPEG tarball or a "
            "folder laid out train/<class>/*.jpg, test/<class>/*.jpg works too)")
    return target


def default_train():
    return Path(os.environ.get("BUILD_DIR", Path(__file__).resolve().parents[1] / "build")) / "train"


def run_train(train, args):
    """Runs `train ARGS`; its one-line error becomes this script's (without spdlog's prefix)."""
    if not (train.is_file() and os.access(train, os.X_OK)):
        raise Refused(f"--to-binary converts with `train convert`, and {train} is not an executable "
                      "file: build it (scripts/setup.sh) or name it with --train")
    proc = subprocess.run([os.path.abspath(train), *args], capture_output=True, text=True,
                          errors="surrogateescape")
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        if not lines:  # not train's one-line error: say which program failed, and how
            raise Refused(f"{train} {args[0]} exited with {proc.returncode} and said nothing: is {train} "
                          "this project's train (--train names it)?")
        raise Refused(re.sub(r"^(\[[^]]*\] )+", "", lines[-1]))
    return proc.stdout


def decode_with_pillow(listing, out_dir):
    """Train's listing decoded with Pillow, written as train convert writes it (5 training files,
    the longer ones first, as numpy.array_split cuts)."""
    try:
        import numpy as np
        from PIL import Image
    except ImportError as e:
        raise Refused(f"--decode-with-pillow needs numpy and Pillow ({e}); run scripts/setup.sh first")
    lines = [json.loads(line) for line in listing.splitlines() if line]
    classes, rows = lines[0]["classes"], lines[1:]
    out_dir.mkdir(parents=True)
    for split, names in (("train", [f"data_batch_{i}.bin" for i in range(1, 6)]), ("test", ["test_batch.bin"])):
        order = [row for row in rows if row["split"] == split]
        records = np.empty((len(order), RECORD_BYTES), dtype=np.uint8)
        for n, row in enumerate(order):
            records[n, 0] = row["label"]
            records[n, 1:] = pillow_pixels(Image, np, row["file"]).transpose(2, 0, 1).reshape(-1)
        for name, chunk in zip(names, np.array_split(records, len(names))):
            chunk.tofile(out_dir / name)
        print(f"{split}: {len(order)} images -> {', '.join(names)} (decoded with Pillow)")
    (out_dir / "batches.meta.txt").write_text("".join(name + "\n" for name in classes))


def pillow_pixels(Image, np, file):
    """One image as 32x32x3 uint8, refused where Pillow and train's OpenCV may disagree."""
    def differs(why):
        return Refused(f"{file}: {why}, which Pillow and train's OpenCV may decode to different pixels; "
                       "convert with `train convert` where train has OpenCV")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning: refused below
            with Image.open(file) as image:
                if image.format not in PILLOW_FORMATS:
                    raise Refused(f"{file}: not a decodable image (train reads no {image.format})")
                if image.size != (32, 32):
                    raise Refused(f"{file}: image is {image.size[0]}x{image.size[1]}, expected 32x32")
                if image.mode not in PILLOW_MODES:
                    raise differs(f"Pillow reads it as mode {image.mode}")
                if image.getexif().get(EXIF_ORIENTATION, 1) != 1:
                    raise differs("it has an EXIF orientation that OpenCV applies and Pillow does not")
                return np.asarray(image.convert("RGB"))
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001: Pillow raises OSError, SyntaxError, DecompressionBombError...
        raise Refused(f"{file}: not a decodable image ({' '.join(str(e).split())})")


def convert_to_binary(image_root, out_dir, train, pillow=False):
    """The image folders as binary batches in `out_dir` (which must not exist yet), read as train
    reads them: `train convert` itself, or train's listing with Pillow's decoder."""
    if pillow:
        decode_with_pillow(run_train(train, ["convert", str(image_root), "--list"]), out_dir)
    else:
        print(run_train(train, ["convert", str(image_root), str(out_dir)]), end="")
    missing = [n for n in BIN_FILES if not (out_dir / n).is_file()]
    if missing:
        raise Refused(f"{train} convert exited 0 but wrote no {', '.join(missing)} into {out_dir}")


def copy(source, destination):
    (shutil.copytree if source.is_dir() else shutil.copyfile)(source, destination)


def gather(tree, kind, place, args, work):
    """What the root gets, in work/result: the binary batches found, the image folders, or their
    conversion. A user's folder is copied; what an archive extracted is moved."""
    result = work / "result"
    result.mkdir()
    put = shutil.move if tree.extracts else copy
    if kind == "binary":
        names = BIN_FILES + [n for n in BIN_EXTRAS if tree.is_file(join(place, n))]
        found = tree.fetch([join(place, n) for n in names], work) / place
        (result / BIN_DIR).mkdir()
        for name in names:
            put(found / name, result / BIN_DIR / name)
        return result
    found = tree.fetch([join(place, "train"), join(place, "test")], work) / place
    if args.to_binary:
        convert_to_binary(found, result / BIN_DIR, args.train, args.decode_with_pillow)
    else:
        for split in ("train", "test"):
            put(found / split, result / split)
    return result


def install(root, result, origin, work, force):
    """Moves the result's entries into the root, each in place of the entry of its name (moved
    aside into `work`, which is removed after), and lists them in the root's manifest."""
    entries = sorted(result.iterdir())
    check_replaceable(root, [entry.name for entry in entries], force)  # again: the work took a while
    root.mkdir(parents=True, exist_ok=True)
    listed = installed(root)
    (work / "replaced").mkdir()
    for entry in entries:
        target = root / entry.name
        if os.path.lexists(target):
            os.replace(target, work / "replaced" / entry.name)
        os.replace(entry, target)
        listed[entry.name] = {**identity(target), "from": origin}
    tmp = root / f"{MANIFEST}.tmp{os.getpid()}"
    try:
        tmp.write_text(json.dumps({"written_by": "scripts/get-data.sh", "installed": listed}, indent=2) + "\n")
        os.replace(tmp, root / MANIFEST)
    finally:
        tmp.unlink(missing_ok=True)


def plan(source, root, args, label=None):
    """Where the source holds CIFAR-10 and what the root gets from it; refused before any work
    when that would replace an entry get-data did not install."""
    tree = open_source(source, label)
    kind, place = find_layout(tree)
    names = [BIN_DIR] if kind == "binary" or args.to_binary else ["train", "test"]
    check_replaceable(root, names, args.force)
    return tree, kind, place, names


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="datasets/cifar10", help="data root (data.root in the config)")
    parser.add_argument("--from", dest="source", help="local tarball or folder instead of downloading")
    parser.add_argument("--to-binary", action="store_true", help="store image folders as binary batches")
    parser.add_argument("--train", help="the train binary that converts (default: $BUILD_DIR/train, "
                        "else build/train)")
    parser.add_argument("--decode-with-pillow", action="store_true",
                        help="with --to-binary where train has no OpenCV: decode train's listing with Pillow")
    parser.add_argument("--force", action="store_true",
                        help="replace the root's cifar-10-batches-bin/ (or train/ and test/) even when "
                             "get-data did not write them")
    args = parser.parse_args(argv)
    try:
        root = script_support.path_argument("--root", args.root, "the data root folder (data.root in the "
                                            "config)", kind="folder", must_exist=False)
        if args.decode_with_pillow and not args.to_binary:
            raise Refused("--decode-with-pillow: only with --to-binary")
        args.train = default_train() if args.train is None else script_support.path_argument(
            "--train", args.train, "the train binary (build it: scripts/setup.sh)")
        source = None if args.source is None else script_support.path_argument(
            "--from", args.source, "a tarball or a folder", kind="file or folder")
        if has_data(root) and not args.force:
            print(f"{root}: CIFAR-10 already present (use --force to replace it)")
            return 0
        planned = plan(source, root, args) if source else None
        root.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".get-data-", dir=root.parent) as work:
            work = Path(work)
            tree, kind, place, names = planned or plan(download(work), root, args, label=URL)
            result = gather(tree, kind, place, args, work)
            install(root, result, tree.origin(place), work, args.force)
        print(f"{root}: CIFAR-10 ready: {', '.join(n + '/' for n in names)} from {tree.origin(place)}")
        return 0
    except OSError as e:
        if e.errno not in WRITE_ERRORS:
            raise
        print(f"get-data: {root}: cannot write the data set there ({e.strerror}); nothing was "
              "installed (free space or choose another --root)", file=sys.stderr)
        return 2
    except Refused as e:
        print(f"get-data: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(script_support.run("get-data", main))
