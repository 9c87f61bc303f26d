"""A core module's tests are found by its name: ``tests/core/<subpackage>/test_<module>.py``
(or ``test_<module>_<aspect>.py``) for ``gateway/core/<subpackage>/<module>.py``, the one
error tree's at the top (``test_errors.py``) and the front door's (``test_front_door.py``)."""

from __future__ import annotations

from pathlib import Path

import gateway.core

CORE = Path(gateway.core.__file__).parent
TESTS = Path(__file__).parent
#: Tests of the core as a whole, not of one module.
WHOLE = {"test_front_door.py", "test_layout.py"}


def _module_of(test: Path) -> Path | None:
    """The core module a test file is named after (the longest that fits), if any."""
    folder = CORE / test.parent.relative_to(TESTS)
    words = test.stem.removeprefix("test_").split("_")
    for end in range(len(words), 0, -1):
        module = folder / ("_".join(words[:end]) + ".py")
        if module.is_file():
            return module
    return None


def test_every_core_test_is_named_after_the_module_it_tests() -> None:
    tests = [p for p in sorted(TESTS.rglob("test_*.py")) if p.name not in WHOLE]
    assert len(tests) > 25  # the whole folder was read
    unnamed = [str(p.relative_to(TESTS)) for p in tests if _module_of(p) is None]
    assert not unnamed, f"tests not under their module's subpackage and name: {unnamed}"


def test_every_subpackage_of_the_core_has_its_tests_folder() -> None:
    packages = sorted(p.parent.name for p in CORE.glob("*/__init__.py"))
    assert packages == sorted(p.parent.name for p in TESTS.glob("*/__init__.py"))
