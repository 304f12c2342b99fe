"""``python -m agent_framework_mongodb``: the command line (needs the ``cli`` extra)."""

from agent_framework_mongodb.cli import main

if __name__ == "__main__":
    main()
