"""Greeting strings."""


def _who(name):
    name = name.strip()
    return name if name else "world"


def greet(name):
    """'Hello, <name>!' for a stripped name; an empty one greets the world."""
    return f"Hello, {_who(name)}!"


def farewell(name):
    """'Goodbye, <name>.' with greet's name rules."""
    return f"Goodbye, {_who(name)}."
