"""Tests for scripts/get_data.py on archives and folders the tests build themselves."""
import errno
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import get_data  # noqa: E402

TRAIN = os.environ.get("TRAIN_BINARY", "")  # ctest sets it: --to-binary converts with `train convert`
needs_train = unittest.skipUnless(TRAIN, "TRAIN_BINARY not set (ctest sets it)")
REAL_TARBALL = Path(os.environ.get("CIFAR10_JPEG_TARBALL", REPO.parent / "shared/data/cifar10-jpeg.tar.gz"))


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


def make_image_tarball(path, work, top="cifar10-jpeg"):
    """A JPEG-tarball lookalike: <top>/{train,test}/<class>/*.png, made from image folders in `work`."""
    make_image_folder(work / top)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(work / top, arcname=top)


def make_binary_folder(folder):
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (folder / name).write_bytes(binary_records([1, 2, 3]))


class GetDataTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def run_main(self, *args):
        code, _, err = self.run_with_output(*args)
        return code, err

    def run_with_output(self, *args):
        with mock.patch("sys.stdout", new=io.StringIO()) as out, mock.patch("sys.stderr", new=io.StringIO()) as err:
            code = get_data.main(list(args))
        return code, out.getvalue(), err.getvalue()

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

    @needs_train
    def test_to_binary_interleaves_classes_like_the_cpp_reader(self):
        make_image_folder(self.dir / "src", per_class=3)
        code, _ = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary",
                                "--train", TRAIN)
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

    @needs_train
    def test_converting_a_root_in_place_keeps_its_image_folders(self):
        make_image_folder(self.dir / "root")
        code, _ = self.run_main("--from", str(self.dir / "root"), "--root", str(self.dir / "root"), "--to-binary", "--force",
                                "--train", TRAIN)
        self.assertEqual(code, 0)
        self.assertTrue((self.dir / "root/cifar-10-batches-bin/test_batch.bin").exists())
        self.assertTrue((self.dir / "root/train/cat/0000.png").exists())

    @needs_train
    def test_wrong_image_size_is_named(self):
        make_image_folder(self.dir / "src", size=16)
        for pillow in ([], ["--decode-with-pillow"]):
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary",
                                      "--train", TRAIN, *pillow)
            self.assertEqual(code, 2)
            self.assertIn("0000.png: image is 16x16, expected 32x32", err)
            self.assertFalse((self.dir / "root").exists() and any((self.dir / "root").iterdir()))

    @needs_train
    def test_pillow_decodes_trains_listing_to_the_bytes_train_convert_writes(self):
        # A hidden file train skips and a file without an image suffix that train reads: the
        # listing is train's, so the records line up with train convert's, byte for byte.
        make_image_folder(self.dir / "src", per_class=3)
        from PIL import Image
        (self.dir / "src/train/cat/.hidden.png").write_bytes(b"not an image")
        Image.new("RGB", (32, 32), (1, 2, 3)).save(self.dir / "src/train/cat/extra", format="PNG")
        Image.new("P", (32, 32), 5).save(self.dir / "src/test/cat/palette.png")
        for name, pillow in (("train", []), ("pillow", ["--decode-with-pillow"])):
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / name), "--to-binary",
                                      "--train", TRAIN, *pillow)
            self.assertEqual(code, 0, err)
        for file in ("data_batch_1.bin", "data_batch_5.bin", "test_batch.bin", "batches.meta.txt"):
            self.assertEqual((self.dir / "pillow/cifar-10-batches-bin" / file).read_bytes(),
                             (self.dir / "train/cifar-10-batches-bin" / file).read_bytes(), file)
        self.assertEqual(sum((self.dir / f"train/cifar-10-batches-bin/data_batch_{i}.bin").stat().st_size
                             for i in range(1, 6)), 7 * 3073)

    @needs_train
    def test_pillow_refuses_an_image_it_may_decode_unlike_train(self):
        make_image_folder(self.dir / "src")
        from PIL import Image
        Image.new("I;16", (32, 32), 40000).save(self.dir / "src/test/cat/deep.png")
        code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary",
                                  "--train", TRAIN, "--decode-with-pillow")
        self.assertEqual(code, 2)
        self.assertIn("deep.png: Pillow reads it as mode I", err)

    @needs_train
    def test_a_set_train_refuses_is_not_converted(self):
        make_image_folder(self.dir / "src")
        for image in (self.dir / "src/test").rglob("*.png"):
            image.unlink()
        for pillow in ([], ["--decode-with-pillow"]):
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary",
                                      "--train", TRAIN, *pillow)
            self.assertEqual(code, 2)
            self.assertIn("test: class folders hold no images", err)
            self.assertFalse((self.dir / "root").exists() and any((self.dir / "root").iterdir()))

    @needs_train
    def test_pillow_keeps_trains_class_list_and_refuses_what_opencv_reads_otherwise(self):
        from PIL import Image
        make_image_folder(self.dir / "src", classes=("airplane", "bird", "cat"))
        for split in ("train", "test"):  # an empty class keeps its name and label
            for image in (self.dir / "src" / split / "bird").iterdir():
                image.unlink()
        for name, pillow in (("train", []), ("pillow", ["--decode-with-pillow"])):
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / name), "--to-binary",
                                      "--train", TRAIN, *pillow)
            self.assertEqual(code, 0, err)
        meta = (self.dir / "train/cifar-10-batches-bin/batches.meta.txt").read_text()
        self.assertEqual(meta, "airplane\nbird\ncat\n")
        self.assertEqual((self.dir / "pillow/cifar-10-batches-bin/batches.meta.txt").read_text(), meta)
        # OpenCV turns an image by its EXIF orientation, Pillow does not; a GIF train cannot read.
        exif = Image.Exif()
        exif[0x0112] = 6
        Image.new("RGB", (32, 32), (9, 9, 9)).save(self.dir / "src/test/cat/turned.jpg", exif=exif)
        Image.new("P", (32, 32), 1).save(self.dir / "src/train/cat/anim.gif")
        for image, said in (("src/test/cat/turned.jpg", "turned.jpg: it has an EXIF orientation"),
                            ("src/train/cat/anim.gif", "anim.gif: not a decodable image (train reads no GIF)")):
            others = [p for p in ("src/test/cat/turned.jpg", "src/train/cat/anim.gif") if p != image]
            moved = {p: (self.dir / p).rename(self.dir / ("away-" + Path(p).name)) for p in others}
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary",
                                      "--train", TRAIN, "--decode-with-pillow")
            for p, away in moved.items():
                away.rename(self.dir / p)
            self.assertEqual(code, 2, err)
            self.assertIn(said, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)

    @needs_train
    def test_a_relative_train_path_is_that_file_and_a_train_that_writes_nothing_is_refused(self):
        make_image_folder(self.dir / "src")
        shutil.copy(TRAIN, self.dir / "train")
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            code, err = self.run_main("--from", "src", "--root", "root", "--to-binary", "--train", "./train")
        finally:
            os.chdir(cwd)
        self.assertEqual(code, 0, err)
        self.assertTrue((self.dir / "root/cifar-10-batches-bin/test_batch.bin").is_file())
        fake = self.dir / "fake-train"
        fake.write_text("#!/bin/sh\necho hi\n")
        fake.chmod(0o755)
        code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root2"), "--to-binary",
                                  "--train", str(fake))
        self.assertEqual(code, 2)
        self.assertIn("convert exited 0 but wrote no data_batch_1.bin", err)
        self.assertFalse((self.dir / "root2").exists() and any((self.dir / "root2").iterdir()))
        # A program that fails without a word is named, with its exit code (round 4: "get-data: exit 1").
        code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root3"), "--to-binary",
                                  "--train", "/bin/false")
        self.assertEqual(code, 2)
        self.assertIn("/bin/false convert exited with 1 and said nothing: is /bin/false this project's train "
                      "(--train names it)?", err)

    def test_sigterm_during_the_conversion_is_exit_130_and_leaves_no_work_folder(self):
        make_image_folder(self.dir / "src")
        fake = self.dir / "slow-train"  # a converter that is still working when the stop comes
        fake.write_text(f"#!/bin/sh\ntouch {self.dir}/started\nexec sleep 60\n")
        fake.chmod(0o755)
        proc = subprocess.Popen([sys.executable, str(REPO / "scripts/get_data.py"), "--from", str(self.dir / "src"),
                                 "--root", str(self.dir / "root"), "--to-binary", "--train", str(fake)],
                                stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            if (self.dir / "started").exists():
                break
            time.sleep(0.05)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, err)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["slow-train", "src", "started"])

    def test_to_binary_without_a_train_binary_says_how_to_get_one(self):
        make_image_folder(self.dir / "src")
        with mock.patch.dict(os.environ, {"BUILD_DIR": str(self.dir / "nobuild")}):
            code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"), "--to-binary")
        self.assertEqual(code, 2)
        self.assertIn("nobuild/train is not an executable file: build it (scripts/setup.sh) or name it with --train",
                      err)
        code, err = self.run_main("--from", str(self.dir / "src"), "--root", str(self.dir / "root"),
                                  "--decode-with-pillow")
        self.assertEqual(code, 2)
        self.assertIn("--decode-with-pillow: only with --to-binary", err)

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

    def test_a_download_is_named_by_its_address(self):
        make_binary_tarball(self.dir / "official.tar.gz")
        payload = (self.dir / "official.tar.gz").read_bytes()
        with mock.patch("urllib.request.urlopen", return_value=io.BytesIO(payload)), \
                mock.patch.object(get_data, "MD5", hashlib.md5(payload).hexdigest()):
            code, out, err = self.run_with_output("--root", str(self.dir / "root"))
        self.assertEqual(code, 0, err)
        self.assertIn(f"CIFAR-10 ready: cifar-10-batches-bin/ from {get_data.URL} (its cifar-10-batches-bin/)", out)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["official.tar.gz", "root"])

    def test_a_write_error_is_blamed_on_the_destination_not_the_source(self):
        # Round 4: a full disk while extracting said "not a readable tar archive ([Errno 28] No
        # space left on device)". A file-size limit stands in for the full disk (EFBIG).
        with tarfile.open(self.dir / "big.tar.gz", "w:gz") as tar:
            for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
                payload = binary_records(list(range(10)) * 4)  # 120 KiB a file
                info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
        import resource

        def limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        proc = subprocess.run([sys.executable, str(REPO / "scripts/get_data.py"), "--from", str(self.dir / "big.tar.gz"),
                               "--root", str(self.dir / "root")], capture_output=True, text=True, preexec_fn=limit,
                              timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(f"get-data: {self.dir / 'root'}: cannot write the data set there (File too large)", proc.stderr)
        self.assertNotIn("not a readable tar archive", proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["big.tar.gz"])
        # A download that cannot be written is the destination's too, not the network's.
        with mock.patch("urllib.request.urlopen", return_value=io.BytesIO(b"x")), \
                mock.patch("shutil.copyfileobj", side_effect=OSError(errno.ENOSPC, "No space left on device")):
            code, err = self.run_main("--root", str(self.dir / "root"))
        self.assertEqual(code, 2)
        self.assertIn("cannot write the data set there (No space left on device)", err)
        self.assertNotIn("could not download", err)

    def test_md5_helper(self):
        (self.dir / "f").write_bytes(b"abc")
        self.assertEqual(get_data.md5_of(self.dir / "f"), hashlib.md5(b"abc").hexdigest())

    def test_a_folder_it_did_not_write_is_never_replaced(self):
        """Reliability round 3: a user's test/ was replaced (exit 0, its files gone), also by a forced
        install of binary batches, which writes no test/ at all."""
        make_image_tarball(self.dir / "jpeg.tar.gz", self.dir / "work")
        root = self.dir / "root"
        (root / "test").mkdir(parents=True)
        (root / "test" / "mine.txt").write_text("my notes")
        code, err = self.run_main("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(root))
        self.assertEqual(code, 2)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(f"{root / 'test'}: already there and not written by get-data (holds mine.txt)", err)
        self.assertIn("--force", err)
        self.assertEqual((root / "test" / "mine.txt").read_text(), "my notes")
        self.assertFalse((root / "train").exists())
        # --force with binary batches replaces cifar-10-batches-bin/ only.
        (root / "train").mkdir()
        (root / "train" / "mine.txt").write_text("more notes")
        make_binary_tarball(self.dir / "bin.tar.gz")
        code, err = self.run_main("--from", str(self.dir / "bin.tar.gz"), "--root", str(root), "--force")
        self.assertEqual(code, 0, err)
        self.assertTrue((root / "cifar-10-batches-bin" / "test_batch.bin").exists())
        self.assertEqual((root / "test" / "mine.txt").read_text(), "my notes")
        self.assertEqual((root / "train" / "mine.txt").read_text(), "more notes")
        # --force replaces what the new install writes, whoever wrote it (as documented).
        code, err = self.run_main("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(root), "--force")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(p.name for p in (root / "test").iterdir()), ["airplane", "cat"])

    def test_a_rerun_replaces_its_own_install_and_nothing_else(self):
        make_image_tarball(self.dir / "jpeg.tar.gz", self.dir / "work")
        root = self.dir / "root"
        self.assertEqual(self.run_main("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(root))[0], 0)
        shutil.rmtree(root / "train")  # an install that lost a split: get-data redoes its own
        code, err = self.run_main("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(root))
        self.assertEqual(code, 0, err)
        self.assertTrue((root / "train" / "cat" / "0000.png").exists())
        # A folder of the user's in place of get-data's own test/ is the user's.
        shutil.rmtree(root / "train")
        shutil.rmtree(root / "test")
        (root / "test").mkdir()
        (root / "test" / "mine.txt").write_text("my notes")
        code, err = self.run_main("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(root))
        self.assertEqual(code, 2)
        self.assertIn(f"{root / 'test'}: already there and not written by get-data", err)
        self.assertTrue((root / "test" / "mine.txt").exists())

    def test_empty_values_are_refused_and_the_current_folder_left_alone(self):
        """`--root ''` installed into the current folder, replacing its test/; `--from ''` searched
        it recursively (reliability round 3)."""
        make_image_tarball(self.dir / "jpeg.tar.gz", self.dir / "work")
        cwd = self.dir / "cwd"
        make_binary_folder(cwd / "old" / "cifar-10-batches-bin")
        (cwd / "test").mkdir()
        (cwd / "test" / "mine.txt").write_text("my notes")
        before = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
        for args, message in ((["--root", "", "--from", str(self.dir / "jpeg.tar.gz")],
                               "get-data: --root: empty; expected the data root folder (data.root in the config)"),
                              (["--from", "", "--root", str(self.dir / "root")],
                               "get-data: --from: empty; expected a tarball or a folder")):
            proc = subprocess.run([sys.executable, str(REPO / "scripts/get_data.py"), *args], cwd=cwd,
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2, (args, proc.stdout))
            self.assertEqual(proc.stderr.strip(), message)
            self.assertEqual(sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*")), before)
            self.assertFalse((self.dir / "root").exists())

    def test_only_the_documented_layouts_at_their_depths_and_ready_names_the_source(self):
        """A folder of top-level images and an old/cifar-10-batches-bin imported the nested copy
        without saying so (reliability round 3)."""
        src = self.dir / "src"
        make_image_folder(src)
        make_binary_folder(src / "old" / "cifar-10-batches-bin")
        code, out, err = self.run_with_output("--from", str(src), "--root", str(self.dir / "root"))
        self.assertEqual(code, 0, err)
        self.assertIn(f"CIFAR-10 ready: train/, test/ from {src}", out)
        self.assertFalse((self.dir / "root" / "cifar-10-batches-bin").exists())
        self.assertTrue((self.dir / "root" / "train" / "cat" / "0000.png").exists())
        # Deeper than documented: not looked for.
        make_binary_folder(self.dir / "deep" / "a" / "cifar-10-batches-bin")
        code, err = self.run_main("--from", str(self.dir / "deep"), "--root", str(self.dir / "root2"))
        self.assertEqual(code, 2)
        self.assertIn("holds neither CIFAR-10 binary batches", err)
        # Binary batches with files missing: named, not imported.
        (self.dir / "part").mkdir()
        (self.dir / "part" / "data_batch_1.bin").write_bytes(binary_records([1]))
        code, err = self.run_main("--from", str(self.dir / "part"), "--root", str(self.dir / "root2"))
        self.assertEqual(code, 2)
        self.assertIn(f"{self.dir / 'part'}: holds data_batch_1.bin but not data_batch_2.bin", err)
        self.assertFalse((self.dir / "root2").exists())
        # A tarball: its own top folder is the documented depth; the ready line names both.
        make_image_tarball(self.dir / "jpeg.tar.gz", self.dir / "work")
        code, out, err = self.run_with_output("--from", str(self.dir / "jpeg.tar.gz"), "--root", str(self.dir / "r3"))
        self.assertEqual(code, 0, err)
        self.assertIn(f"CIFAR-10 ready: train/, test/ from {self.dir / 'jpeg.tar.gz'} (its cifar10-jpeg/)", out)
        with tarfile.open(self.dir / "deep.tar.gz", "w:gz") as tar:
            tar.add(self.dir / "work", arcname="a")
        code, err = self.run_main("--from", str(self.dir / "deep.tar.gz"), "--root", str(self.dir / "r4"))
        self.assertEqual(code, 2)
        self.assertIn("holds neither CIFAR-10 binary batches", err)

    @unittest.skipUnless(REAL_TARBALL.is_file(), f"{REAL_TARBALL} not found")
    def test_the_real_tarball_keeps_a_users_folder(self):
        root = self.dir / "root"
        (root / "test").mkdir(parents=True)
        (root / "test" / "mine.txt").write_text("my notes")
        code, err = self.run_main("--from", str(REAL_TARBALL), "--root", str(root))
        self.assertEqual(code, 2)
        self.assertIn(f"{root / 'test'}: already there and not written by get-data (holds mine.txt)", err)
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["root"])  # no temporary left


if __name__ == "__main__":
    unittest.main()
