"""Tests of ``gateway/core/watch``, a module's by its name."""
