"""Tests of ``gateway/core/process``, a module's by its name."""
