"""Tests of ``gateway/core/model``, a module's by its name."""
