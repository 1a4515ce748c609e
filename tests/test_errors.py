"""One exception base: every public error class of the package is under `EdgeRuntimeError`,
and the tree drawn in `edge_runtime.errors` names exactly those classes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import edge_runtime
from edge_runtime import errors
from edge_runtime.errors import EdgeRuntimeError


def _public_error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(edge_runtime.__path__, prefix="edge_runtime."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("edge_runtime.")
                and not name.startswith("_")
            ):
                found[name] = value
    return found


def test_every_public_error_of_the_package_derives_from_the_one_base() -> None:
    classes = _public_error_classes()
    assert len(classes) >= 12, sorted(classes)
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, EdgeRuntimeError))
    assert outside == []


def test_the_tree_in_the_module_docstring_names_exactly_the_classes_under_the_base() -> None:
    drawn = set(re.findall(r"[├└]── (\w+)", errors.__doc__ or ""))
    actual = {name for name in _public_error_classes() if name != "EdgeRuntimeError"}
    assert drawn == actual


def test_each_error_keeps_its_builtin_base_so_existing_handlers_still_catch_it() -> None:
    doc = errors.__doc__ or ""
    classes = _public_error_classes()
    for name, builtin in re.findall(r"[├└]── (\w+)\((\w+)\)", doc):
        assert issubclass(classes[name], getattr(__import__("builtins"), builtin)), name
