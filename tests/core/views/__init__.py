"""Tests of ``gateway/core/views``, a module's by its name."""
