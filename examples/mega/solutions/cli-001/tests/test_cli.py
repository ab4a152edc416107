import contextlib
import io
import unittest

from greet.cli import main


class CliTest(unittest.TestCase):
    def run_main(self, argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(argv)
        return code, out.getvalue()

    def test_one_line_per_name(self):
        self.assertEqual(self.run_main(["Ada", "Alan"]), (0, "Hello, Ada!\nHello, Alan!\n"))

    def test_no_names_greets_the_world(self):
        self.assertEqual(self.run_main([]), (0, "Hello, world!\n"))


if __name__ == "__main__":
    unittest.main()
