"""Old import paths of modules that moved into subpackages, kept working as aliases.

``import legged_wbc.ros.host_link`` gives the module now at ``legged_wbc.ros.transport.host_link``
(the same module object, so patching either name patches both). The packages that moved modules
call :func:`alias` once with their table; nothing else in the project imports an old path (a test
checks the tables against the tree).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_TABLE: dict[str, str] = {}


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new name."""

    def find_spec(self, name, path=None, target=None):
        if name not in _TABLE:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return importlib.import_module(_TABLE[spec.name])

    def exec_module(self, module) -> None:
        pass


_FINDER = _Aliases()


def alias(package: str, moved: dict[str, str]) -> None:
    """Register ``package.<old> -> package.<new>`` for each ``old: new`` of ``moved``."""
    _TABLE.update({f"{package}.{old}": f"{package}.{new}" for old, new in moved.items()})
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def table() -> dict[str, str]:
    """Every registered old name and its new one."""
    return dict(_TABLE)
