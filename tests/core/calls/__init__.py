"""Tests of ``gateway/core/calls``, a module's by its name."""
