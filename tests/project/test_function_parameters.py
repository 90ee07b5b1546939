"""Options travel as objects (RunOptions, PredictOptions, ServeOptions, SplitPlan, TableRead...):
no function of the package takes more than eight parameters, keyword-only ones and ``*args`` /
``**kwargs`` included.

Two kinds are exempt, as the design notes say: the click command functions, which take one
parameter per flag because click passes them so and build their options object at once, and the
scikit-learn-style estimators' ``__init__``, whose convention is one keyword per hyperparameter
(``get_params`` reads them from the signature)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

MAX_PARAMETERS = 8


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> int:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def exempt(function: ast.FunctionDef | ast.AsyncFunctionDef, owner: ast.ClassDef | None) -> bool:
    """A click command, or the ``__init__`` of a class with a ``fit`` (an estimator)."""
    if any(".command(" in ast.unparse(d) or ast.unparse(d).endswith(".command") for d in function.decorator_list):
        return True
    return (function.name == "__init__" and owner is not None
            and any(isinstance(n, ast.FunctionDef) and n.name == "fit" for n in owner.body))


def too_many(source: str, where: str) -> list[str]:
    """``file:line name (count)`` for each function of ``source`` over the limit, not exempt."""
    found: list[str] = []

    def visit(node: ast.AST, owner: ast.ClassDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = parameter_count(child, method=owner is not None)
                if count > MAX_PARAMETERS and not exempt(child, owner):
                    found.append(f"{where}:{child.lineno} {child.name} ({count})")
                visit(child, None)
            elif isinstance(child, ast.ClassDef):
                visit(child, child)
            else:
                visit(child, owner)

    visit(ast.parse(source), None)
    return found


def test_no_function_takes_more_than_eight_parameters() -> None:
    found = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        found += too_many(path.read_text(encoding="utf-8"), str(Path(path).relative_to(ROOT)))
    assert not found, f"pass an options object instead of more than {MAX_PARAMETERS} parameters: {found}"


def test_the_count_includes_keyword_only_and_star_parameters_and_only_commands_are_exempt() -> None:
    """The check above can fail: nine parameters in any form are found; a click command and an
    estimator's constructor are not."""
    source = '''
def plain(a, b, c, d, e, f, g, h, i): ...
def starred(a, b, c, d, e, f, g, *args, **kwargs): ...
def eight(a, b, c, /, d, *, e, f, g, h): ...
class Thing:
    def method(self, a, b, c, d, e, f, g, h, i): ...
class Estimator:
    def __init__(self, a, b, c, d, e, f, g, h, i): ...
    def fit(self, X, y): ...
@click.command()
def command(a, b, c, d, e, f, g, h, i): ...
@main.command("name")
def grouped(a, b, c, d, e, f, g, h, i): ...
'''
    assert too_many(source, "x.py") == ["x.py:2 plain (9)", "x.py:3 starred (9)", "x.py:6 method (9)"]
