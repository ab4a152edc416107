import unittest

import greet


class PackageTest(unittest.TestCase):
    def test_the_package_imports(self):
        self.assertIn("greet", greet.__doc__)


if __name__ == "__main__":
    unittest.main()
