"""Greeting strings."""


def _who(name):
    name = name.strip()
    return name if name else "world"


def greet(name):
    """'Hello, <name>!' for a stripped name; an empty one greets the world."""
    return f"Hello, {_who(name)}!"
