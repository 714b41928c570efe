"""Is a candidate the problem's own reference? The reference is shown in the prompt, so returning
it passes at ~1.0x and would count as Good: a model that does nothing would score. A candidate
whose program is the reference's, once what does not change what runs is set aside, is a copy:

- comments, formatting, docstrings and other bare constant statements;
- type annotations (and `from __future__` imports, which only change how they are read);
- imports nothing uses, and the order of the module's top-level imports;
- the names the module binds itself (functions, arguments, variables, import aliases), renamed
  in order of first appearance. Names it does not bind (builtins, attributes such as
  `dist.all_reduce`, keyword arguments of library calls) stay: they say what is called.

Two programs that differ in anything else (an extra statement, another call, a different default
argument spelled out) are not copies. Stdlib only; never imports the candidate.
"""
from __future__ import annotations

import ast


def _drop_docs_and_annotations(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            kept = [ast.Assign(targets=[s.target], value=s.value, lineno=0) if isinstance(s, ast.AnnAssign)
                    and s.value is not None else s for s in kept]
            kept = [s for s in kept if not isinstance(s, ast.AnnAssign)]
            node.body = kept or [ast.Pass()]            # type: ignore[attr-defined]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        if isinstance(node, ast.arg):
            node.annotation = None


def _bound_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _sort_and_prune_imports(tree: ast.Module) -> None:
    """Top-level imports first, in a fixed order, without the ones nothing reads."""
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
    loaded |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    imports, rest = [], []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            stmt.names = [a for a in stmt.names if a.name == "*" or _bound_name(a) in loaded]
            if stmt.names:
                imports.append(stmt)
        else:
            rest.append(stmt)
    # by what is imported, not by the alias (the alias is a name like any other)
    imports.sort(key=lambda s: (type(s).__name__, getattr(s, "module", None) or "", [a.name for a in s.names]))
    tree.body = imports + rest


def _bound_names(tree: ast.AST) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.alias) and node.name != "*":
            bound.add(_bound_name(node))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


class _Renamer(ast.NodeTransformer):
    """Every name the module binds becomes n0, n1, ... in order of first appearance; keyword
    arguments follow their parameter when the callee's parameters are the module's own."""

    def __init__(self, bound: set[str]):
        self.bound = bound
        self.names: dict[str, str] = {}

    def canon(self, name: str) -> str:
        if name not in self.bound:
            return name
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.canon(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.canon(node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.canon(node.name)
        return self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        node.name = self.canon(node.name)
        return self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self.canon(node.name)
        return self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> ast.AST:
        if node.name != "*":
            node.asname = self.canon(_bound_name(node))
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        if node.arg is not None and node.arg in self.names:
            node.arg = self.names[node.arg]
        return self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> ast.AST:
        node.names = [self.canon(n) for n in node.names]
        return node

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.AST:
        node.names = [self.canon(n) for n in node.names]
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            node.name = self.canon(node.name)
        return self.generic_visit(node)


def normalize(source: str) -> str | None:
    """The program with comments, formatting, docstrings, annotations, unused imports, import
    order and its own names set aside (a dump of its AST); None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    _drop_docs_and_annotations(tree)
    _sort_and_prune_imports(tree)
    tree = _Renamer(_bound_names(tree)).visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def is_reference_copy(candidate: str | None, reference: str | None) -> bool:
    if not candidate or not reference:
        return False
    mine = normalize(candidate)
    return mine is not None and mine == normalize(reference)


MESSAGE = ("the candidate is the problem's reference (the same program once comments, formatting, docstrings, "
           "annotations, unused imports and the names it binds are set aside): it is no solution, and is "
           "counted as a failure, never in GM-Speedup or PASS+Good")
