"""greet: greeting functions (greet.core) and a command-line front end (greet.cli)."""
