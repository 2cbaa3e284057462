"""scripts/check_sizes.py finds a file over 400 lines and a function over 80, names them, and
lets a function with a reasoned NOLINT stay long."""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "check_sizes.py"


def function(name: str, lines: int, exempt: str = "") -> str:
    body = "".join(f"  x += {i};\n" for i in range(lines - 3))
    return f"int {name}(int x) {{{exempt}\n{body}  return x;\n}}\n"


class CheckSizesTest(unittest.TestCase):
    def run_on(self, files: dict[str, str]) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for name, text in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text)
            subprocess.run(["git", "init", "-q"], cwd=root, check=True)
            subprocess.run(["git", "add", "."], cwd=root, check=True)
            return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True,
                                  text=True)

    def test_within_limits_passes(self):
        result = self.run_on({"training/a.cpp": function("short_one", 80)})
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("1 functions within 80 lines", result.stdout)

    def test_long_function_is_named(self):
        result = self.run_on({"training/a.cpp": "\n" + function("long_one", 81)})
        self.assertEqual(result.returncode, 1)
        self.assertIn("training/a.cpp:2: function long_one is 81 lines, more than 80",
                      result.stdout)

    def test_reasoned_exemption_passes_and_bare_one_does_not(self):
        reasoned = function("table", 120, "  // NOLINT(readability-function-size): one table")
        self.assertEqual(self.run_on({"models/t.cpp": reasoned}).returncode, 0)
        bare = function("table", 120, "  // NOLINT(readability-function-size)")
        self.assertEqual(self.run_on({"models/t.cpp": bare}).returncode, 1)

    def test_long_file_is_named(self):
        result = self.run_on({"app/b.h": "// line\n" * 401, "other/c.h": "// line\n" * 900})
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.strip(), "app/b.h: 401 lines, more than 400")


if __name__ == "__main__":
    unittest.main()
