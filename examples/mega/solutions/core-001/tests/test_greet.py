import unittest

from greet.core import greet


class GreetTest(unittest.TestCase):
    def test_a_name_is_greeted(self):
        self.assertEqual(greet("Ada"), "Hello, Ada!")

    def test_spaces_are_stripped_and_nobody_is_the_world(self):
        self.assertEqual(greet("  Ada "), "Hello, Ada!")
        self.assertEqual(greet("  "), "Hello, world!")


if __name__ == "__main__":
    unittest.main()
