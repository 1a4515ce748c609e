"""Names of a package imported from their modules on first use (PEP 562).

A leaf agent imports only what it runs (import time and RSS count on a Pi), so a
package whose names live in modules a leaf does not need resolves them lazily: ``from
package import Name`` and ``package.Name`` work as before, the module is imported when the
name is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    namespace: dict[str, Any], module_of: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names load on first use.

    Parameters
    ----------
    namespace : dict
        The package's ``globals()``: a loaded name is stored there, so it is looked up once.
    module_of : mapping of str to str
        The module (dotted path) that defines each lazily loaded name.
    public : iterable of str
        The names ``dir()`` lists besides what is already loaded: the package's ``__all__``,
        or, for an internal package (empty ``__all__``), its lazily loaded names.

    Returns
    -------
    __getattr__, __dir__
        ``__getattr__(name)`` raises `AttributeError` (naming the package and the name) for a
        name not in ``module_of``, as a missing attribute does.
    """
    package = namespace["__name__"]
    listed = set(public)

    def __getattr__(name: str) -> Any:  # noqa: N807
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(namespace) | listed)

    return __getattr__, __dir__
