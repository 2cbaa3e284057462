"""Tests for scripts/get_data.py on archives and folders the tests build themselves."""
import hashlib
import io
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import get_data  # noqa: E402


def binary_records(labels):
    out = bytearray()
    for i, label in enumerate(labels):
        out.append(label)
        out += bytes((i + p) % 256 for p in range(3072))
    return bytes(out)


def make_binary_tarball(path, top="cifar-10-batches-bin"):
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            payload = binary_records([1, 2, 3])
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def make_image_folder(root, per_class=2, classes=("cat", "airplane"), size=32):
    from PIL import Image
    for split in ("train", "test"):
        for label, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (size, size), (label * 100, i * 50, 7)).save(root / split / name / f"{i:04d}.png")


class GetDataTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_main(self, *args):
        with mock.patch("sys.stdout", new=io.StringIO()), mock.patch("sys.stderr", new=io.StringIO()) as err:
            code = get_data.main(list(args))
        return code, err.getvalue()

    def test_binary_tarball_is_unpacked_into_the_root(self):
        make_binary_tarball(self.dir / "any.tar.gz")
        code, _ = self.run_main("--from", str(self.dir / "any.tar.gz"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 0)
        self.assertEqual((self.dir / "root/cifar-10-batches-bin/test_batch.bin").stat().st_size, 3 * 3073)

    def test_official_name_with_wrong_md5_is_refused_and_root_left_empty(self):
        make_binary_tarball(self.dir / "cifar-10-binary.tar.gz")
        code, err = self.run_main("--from", str(self.dir / "cifar-10-binary.tar.gz"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("does not match the official c32a1d4ab5d03f1284b67883e8d87530", err)
        self.assertFalse((self.dir / "root").exists() and any((self.dir / "root").iterdir()))

    def test_image_folder_is_copied_and_existing_data_kept(self):
        make_image_folder(self.dir / "src")
        code, _ = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 0)
        self.assertTrue((self.dir / "root/train/cat/0001.png").exists())
        self.assertTrue((self.dir / "src/train/cat/0001.png").exists())  # the source is untouched
        code, _ = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 0)  # already present: nothing to do

    def test_to_binary_interleaves_classes_like_the_cpp_reader(self):
        make_image_folder(self.dir / "src", per_class=3)
        code, _ = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary")
        self.assertEqual(code, 0)
        bins = self.dir / "root/cifar-10-batches-bin"
        data = b"".join((bins / f"data_batch_{i}.bin").read_bytes() for i in range(1, 6))
        self.assertEqual(len(data), 6 * 3073)
        labels = [data[r * 3073] for r in range(6)]
        self.assertEqual(labels, [0, 1, 0, 1, 0, 1])  # airplane=0, cat=1, round robin
        # record 0 = airplane/0000.png, drawn as (100, 0, 7); record 3 = cat/0001.png, (0, 50, 7)
        first, fourth = data[:3073], data[3 * 3073:4 * 3073]
        self.assertEqual((first[1], first[1 + 1024], first[1 + 2048]), (100, 0, 7))
        self.assertEqual((fourth[5], fourth[5 + 1024], fourth[5 + 2048]), (0, 50, 7))
        self.assertFalse((self.dir / "root/train").exists())

    def test_converting_a_root_in_place_keeps_its_image_folders(self):
        make_image_folder(self.dir / "root")
        code, _ = self.run_main("--from", str(self.dir / "root"), "--root", str(self.dir / "root"), "--to-binary", "--force")
        self.assertEqual(code, 0)
        self.assertTrue((self.dir / "root/cifar-10-batches-bin/test_batch.bin").exists())
        self.assertTrue((self.dir / "root/train/cat/0000.png").exists())

    def test_wrong_image_size_is_named(self):
        make_image_folder(self.dir / "src", size=16)
        code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary")
        self.assertEqual(code, 2)
        self.assertIn("0000.png: image is 16x16, expected 32x32", err)

    def test_unsafe_tar_member_is_refused(self):
        with tarfile.open(self.dir / "evil.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo("../escape.txt")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        code, err = self.run_main("--from", str(self.dir / "evil.tar.gz"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("unsafe member '../escape.txt'", err)
        self.assertFalse((self.dir / "escape.txt").exists())

    def test_not_an_archive_and_missing_source(self):
        (self.dir / "junk.tar.gz").write_bytes(b"junk")
        code, err = self.run_main("--from", str(self.dir / "junk.tar.gz"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("not a readable tar archive", err)
        code, err = self.run_main("--from", str(self.dir / "nothing"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("nothing: no such file or folder", err)

    def test_folder_without_cifar_is_refused(self):
        (self.dir / "empty").mkdir()
        code, err = self.run_main("--from", str(self.dir / "empty"), "--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("holds neither CIFAR-10 binary batches", err)

    def test_no_network_says_what_to_do(self):
        with mock.patch("urllib.request.urlopen", side_effect=OSError("no route to host")):
            code, err = self.run_main("--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("could not download", err)
        self.assertIn("scripts/get-data.sh --from /path/to/cifar-10-binary.tar.gz", err)

    def test_md5_helper(self):
        (self.dir / "f").write_bytes(b"abc")
        self.assertEqual(get_data.md5_of(self.dir / "f"), hashlib.md5(b"abc").hexdigest())


if __name__ == "__main__":
    unittest.main()
