"""Every public module, class and function of the attnkit package has a docstring, as
`python -m pydoc attnkit` and `help()` show it.

The public names of a module are its __all__ when it defines one, else the names not starting with
'_' that the module itself defines (names imported from elsewhere, numpy for one, are not its own).
Public methods, properties, static and class methods defined in a public class count too. A
dataclass's or NamedTuple's generated docstring (its signature, "Case(name, ...)") does not count.
Modules that need torch or transformers are checked when those import, and skipped otherwise.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

# Every public module of the package, with what it needs to import.
MODULES = {
    "attnkit": (),
    "attnkit.functional": (),
    "attnkit.varlen": (),
    "attnkit.kv_cache": (),
    "attnkit.files": (),
    "attnkit.heads": (),
    "attnkit.bench": (),
    "attnkit.bench_peers": (),
    "attnkit.integrations": (),
    "attnkit.torch": ("torch",),
    "attnkit.nn": ("torch",),
    "attnkit.integrations.transformers": ("torch", "transformers"),
}


def _load(name):
    for needed in MODULES[name]:
        pytest.importorskip(needed, reason=f"{name} needs {needed}, which is not installed")
    return importlib.import_module(name)


def _documented(obj, name):
    doc = obj.__doc__
    if not isinstance(doc, str) or not doc.strip():
        return False
    # dataclasses and NamedTuples make up a docstring from the signature when the class has none
    if inspect.isclass(obj) and doc.strip().startswith(f"{name}("):
        return False
    return True


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    own = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType):
            if not value.__name__.startswith(module.__name__ + "."):
                continue  # an imported module (numpy, or a sibling), not a submodule
        elif getattr(value, "__module__", None) != module.__name__:
            continue  # imported from elsewhere, or a constant
        own.append(name)
    return own


def _members(cls):
    """(name, object) of the public methods and properties a class defines itself."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            yield name, value


def _undocumented(module):
    missing = []
    if not _documented(module, module.__name__):
        missing.append(f"module {module.__name__}")
    for name in _public_names(module):
        obj = getattr(module, name)
        what = f"{module.__name__}.{name}"
        if isinstance(obj, types.ModuleType):
            if not _documented(obj, obj.__name__):
                missing.append(f"module {what}")
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue  # constants (DEFAULT_TEXT, NAME, __version__) carry no docstring of their own
        if not _documented(obj, name):
            missing.append(f"{'class' if inspect.isclass(obj) else 'function'} {what}")
        if inspect.isclass(obj) and obj.__module__.startswith("attnkit"):
            for member, value in _members(obj):
                if not _documented(value, member):
                    missing.append(f"method {what}.{member}")
    return missing


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_public_name_has_a_docstring(name):
    missing = _undocumented(_load(name))
    assert not missing, "no docstring: " + ", ".join(missing)


def test_the_package_names_its_public_modules():
    """Every public module of the package is in MODULES, so a new one cannot go unchecked."""
    import pkgutil

    import attnkit

    found = {"attnkit"}
    for info in pkgutil.walk_packages(attnkit.__path__, "attnkit.", onerror=lambda name: None):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    assert found <= set(MODULES), f"public modules not checked here: {sorted(found - set(MODULES))}"


def test_the_check_finds_a_missing_docstring():
    module = types.ModuleType("attnkit_example", "An example module.")

    def documented():
        """Does something."""

    def bare():
        pass

    class Bare:
        def method(self):
            pass

    for obj in (documented, bare, Bare):
        obj.__module__ = module.__name__
        setattr(module, obj.__name__, obj)
    assert _undocumented(module) == [
        "function attnkit_example.bare",
        "class attnkit_example.Bare",
        "method attnkit_example.Bare.method",
    ]
