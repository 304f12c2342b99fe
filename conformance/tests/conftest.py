"""The suite's own tests; ``pytester`` runs the plugin in a nested pytest session."""

pytest_plugins = ["pytester"]
