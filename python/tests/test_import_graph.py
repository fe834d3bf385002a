"""The attnkit package's modules import each other without a cycle.

Every `import` and `from ... import` between the package's own modules counts, at the top of a
module or inside a function: an import moved into a function still ties the two modules together,
it only hides the cycle until the function runs. Imports inside functions that keep torch optional
are fine as long as the module they load does not import its caller back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attnkit

PACKAGE = "attnkit"


def _module_names(root, package):
    """{module name: source file, or None for a compiled extension (attnkit._core)} under `root`."""
    modules = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".so", ".pyd"):
            continue
        parts = list(path.relative_to(root).parts)
        parts[-1] = parts[-1].split(".")[0]  # _core.cpython-311-x86_64-linux-gnu.so: _core
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([package, *parts])] = path if path.suffix == ".py" else None
    return modules


def _resolve(name, path, node):
    """The absolute module a `from ... import` statement's `from` part names."""
    if node.level == 0:
        return node.module
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root, package=PACKAGE):
    """{module: {imported module: [(line, where)]}} over the package's own modules, `where` being
    "top level" or "in <function>"."""
    modules = _module_names(root, package)
    graph = {name: {} for name in modules}
    for name, path in modules.items():
        if path is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        _collect(tree, name, path, modules, graph[name], "top level")
    return graph


def _collect(node, name, path, modules, edges, where):
    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = f"in {child.name}()"
        targets = []
        if isinstance(child, ast.Import):
            for alias in child.names:
                parts = alias.name.split(".")
                # `import a.b.c` loads a.b.c: the longest prefix that is one of ours
                known = [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules]
                targets += known[:1]
        elif isinstance(child, ast.ImportFrom):
            source = _resolve(name, path, child)
            for alias in child.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    targets.append(submodule)
                elif source in modules:
                    targets.append(source)
        for target in targets:
            if target != name and (child.lineno, inner) not in edges.get(target, []):
                edges.setdefault(target, []).append((child.lineno, inner))
        _collect(child, name, path, modules, edges, inner)


def find_cycles(graph):
    """One cycle (a list of modules, first = last) per back edge a depth-first search meets."""
    cycles, state, stack = [], {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph.get(module, {})):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def describe(cycle, graph):
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        line, where = graph[a][b][0]
        steps.append(f"{a} imports {b} (line {line}, {where})")
    return " -> ".join(cycle) + ": " + "; ".join(steps)


def test_the_package_has_no_import_cycle():
    root = Path(attnkit.__file__).parent
    graph = import_graph(root)
    assert "attnkit.functional" in graph and "attnkit.torch" in graph, sorted(graph)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in the attnkit package:\n" + "\n".join(describe(c, graph) for c in cycles)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import f\n")
    (package / "a.py").write_text("from .sub import b\n\ndef f():\n    return b.g()\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def g():\n    from .. import a\n    return a\n")
    (package / "c.py").write_text("import pkg.a\nfrom . import _ext\n")
    (package / "_ext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    graph = import_graph(package, "pkg")
    assert graph["pkg.sub.b"] == {"pkg.a": [(2, "in g()")]}
    assert graph["pkg.c"] == {"pkg.a": [(1, "top level")], "pkg._ext": [(2, "top level")]}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    assert "pkg.sub.b imports pkg.a (line 2, in g())" in describe(cycles[0], graph)
