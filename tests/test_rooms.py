"""Which room may import which: the searches (asr.decode) and the model (asr.model) never reach up
into the evaluation that runs a model on a split (asr.evaluation); no modules of asr/ import each other
in a circle, at the top of a file or inside a function; the model imports at the top of its files,
never inside a function (an import there hides a cycle between two of its files); and tests reach logic
through the package, not by loading scripts by their path."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# room -> packages no module of the room imports, at the top or inside a function.
BELOW = {
    "asr/decode": ("asr.evaluation",),
    "asr/model": ("asr.evaluation", "asr.decode"),
}


def imported_modules(path: Path) -> list[str]:
    """Every module an ``import``/``from ... import`` in the file names (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module or ""]))
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("room", sorted(BELOW))
def test_a_room_imports_nothing_above_it(room):
    wrong = [f"{path.relative_to(ROOT)}: {name}" for path in sorted((ROOT / room).rglob("*.py"))
             for name in imported_modules(path)
             if any(name == above or name.startswith(above + ".") for above in BELOW[room])]
    assert not wrong, f"{room} imports from a room above it: {wrong}"


def module_name(path: Path) -> str:
    """``asr/x/y.py`` -> ``asr.x.y``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module of asr/ -> the modules of asr/ it imports anywhere in its file (``from a import b`` counts
    ``a.b`` when that is a module)."""
    paths = {module_name(path): path for path in sorted((ROOT / "asr").rglob("*.py"))}
    return {name: {m for m in imported_modules(path) if m in paths and m != name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(component) > 1:
                        found.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in stack:
                low[node] = min(low[node], index[step])
    return found


def test_circles_finds_a_circle_of_three_and_none_in_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_modules_import_each_other_in_a_circle():
    found = circles(import_graph())
    assert not found, f"modules of asr/ that import each other in a circle (a shared module breaks it): {found}"


def test_the_model_imports_only_at_the_top_of_its_files():
    inner = []
    for path in sorted((ROOT / "asr/model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner += [f"{path.relative_to(ROOT)}:{sub.lineno}" for sub in ast.walk(node)
                          if isinstance(sub, (ast.Import, ast.ImportFrom))]
    assert not inner, f"imports inside functions: {inner}"


# A test imports the package, never a script: a script is argument parsing plus one call, and the
# logic a test checks lives in asr/ (asr.cli.<name>.main for a program).
# Runs each script as a program (``python scripts/X.py --help``, all in one interpreter): a
# subprocess's view of the script, not a test reaching into its functions.
RUNS_SCRIPTS_AS_PROGRAMS = {"tests/script_help.py"}
SCRIPT_BY_PATH = re.compile(r"spec_from_file_location|runpy\.run_path|sys\.path\.insert\([^\n]*scripts")


def test_tests_do_not_load_scripts_by_path():
    loaders = {str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("*.py"))
               if path != Path(__file__).resolve() and SCRIPT_BY_PATH.search(path.read_text())}
    loaders -= RUNS_SCRIPTS_AS_PROGRAMS
    assert not loaders, f"tests that load a script by its path (import asr.cli.<name> instead): {sorted(loaders)}"
