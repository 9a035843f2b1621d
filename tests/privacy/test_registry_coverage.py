"""Every registered mechanism has a release-path privacy test in this directory.

Each ``test_release_*.py`` module names the registry entries it checks in
``MECHANISMS_COVERED``; a mechanism added to `mechanisms.registry` without such
a module fails here.
"""

import importlib
from pathlib import Path

from mechanisms import registry


def _covered() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(Path(__file__).parent.glob("test_release_*.py")):
        module = importlib.import_module(path.stem)
        for name in module.MECHANISMS_COVERED:
            out.setdefault(name, []).append(path.stem)
    return out


def test_every_registered_mechanism_has_a_release_path_privacy_test():
    covered = _covered()
    missing = sorted(set(registry.MECHANISMS) - set(covered))
    assert not missing, f"registered mechanisms without a release-path privacy test: {missing}"
    unknown = sorted(set(covered) - set(registry.MECHANISMS))
    assert not unknown, f"privacy tests name mechanisms the registry does not have: {unknown}"
