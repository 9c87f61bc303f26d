"""Tests of ``gateway/core/upstream``, a module's by its name."""
