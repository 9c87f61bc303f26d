"""Tests of ``gateway/core/support``, a module's by its name."""
