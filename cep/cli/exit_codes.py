"""Exit codes of the ``cep`` command: 0 ok, 1 matches (--fail-on-match) or failed tests (cep test), 2 usage, 3 runtime."""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_MATCHES", "EXIT_TESTS_FAILED", "EXIT_USAGE", "EXIT_RUNTIME"]

EXIT_OK, EXIT_MATCHES, EXIT_USAGE, EXIT_RUNTIME = 0, 1, 2, 3

EXIT_TESTS_FAILED = EXIT_MATCHES  # cep test: a test failed
