"""The ``partita`` command."""
