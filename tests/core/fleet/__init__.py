"""Tests of ``gateway/core/fleet``, a module's by its name."""
