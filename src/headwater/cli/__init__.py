"""The ``headwater`` command: :func:`headwater.cli.main.main` is its entry point."""
