"""Tests of ``gateway/core/lists``, a module's by its name."""
