import unittest

from greet.core import farewell


class FarewellTest(unittest.TestCase):
    def test_a_name_is_bid_farewell(self):
        self.assertEqual(farewell("Ada"), "Goodbye, Ada.")
        self.assertEqual(farewell(""), "Goodbye, world.")


if __name__ == "__main__":
    unittest.main()
