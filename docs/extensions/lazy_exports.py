"""A griffe extension for the docs build: the names a package exports through ``agentgym._lazy.lazy_exports`` appear in its API reference.

Those names exist only at run time (a module ``__getattr__`` imports their submodule on first use), and
mkdocstrings reads the code without importing it, so without this a package's reference page would show its
docstring and nothing it exports. The extension reads the same mapping the package passes to ``lazy_exports``
(a dict literal, inline or bound to a module-level name) and adds each name as an exported alias of its
definition; a mapping that is not a literal fails the build, so the reference can never silently lose a page.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class LazyExports(griffe.Extension):
    """Adds the ``lazy_exports`` names of each visited module as aliases, and lists them in its exports."""

    def on_module_members(self, *, node: ast.AST | griffe.ObjectNode, mod: griffe.Module, **kwargs: Any) -> None:
        if not isinstance(node, ast.Module):
            return
        literals = {
            target.id: statement.value
            for statement in node.body
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Dict)
            for target in statement.targets
            if isinstance(target, ast.Name)
        }
        for statement in node.body:
            call = statement.value if isinstance(statement, ast.Assign) else None
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "lazy_exports"):
                continue
            mapping = (
                call.args[1]
                if len(call.args) > 1
                else next((k.value for k in call.keywords if k.arg == "exports"), None)
            )
            if isinstance(mapping, ast.Name):
                mapping = literals.get(mapping.id)
            if not isinstance(mapping, ast.Dict):
                raise ValueError(f"{mod.path}: the mapping given to lazy_exports is not a dict literal")
            names = []
            for key, value in zip(mapping.keys, mapping.values):
                name, submodule = ast.literal_eval(key), ast.literal_eval(value)
                mod.set_member(name, griffe.Alias(name, f"{mod.path}.{submodule}.{name}", parent=mod))
                names.append(name)
            # __all__ entries griffe could not expand (``sorted(_EXPORTS)``, ``*_LAZY``) are these names.
            kept = [entry for entry in mod.exports or [] if isinstance(entry, str) and entry not in names]
            mod.exports = kept + names
