"""Tests of ``gateway/core/catalog``, a module's by its name."""
