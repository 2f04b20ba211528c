"""The rooms' import order (docs/architecture.md): import-linter's contracts, and pure modules
loaded in a fresh interpreter without DuckDB or Dagster."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.processes import default_signals

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
HEAVY = ("duckdb", "dagster")


def _contract_sources(name: str) -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c["source_modules"] for c in contracts if c["name"] == name)


PURE_MODULES = _contract_sources("Pure modules import neither DuckDB nor Dagster")


def _heavy_modules_loaded(modules: list[str]) -> list[str]:
    """The DuckDB and Dagster modules a fresh interpreter holds after importing `modules`."""
    script = (
        "import importlib, json, pkgutil, sys\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(getattr(module, '__path__', []), name + '.'):\n"
        "        importlib.import_module(info.name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=default_signals,
    )
    return list(json.loads(done.stdout))


def test_the_import_contracts_hold() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """The same tool on a contract the code breaks (the warehouse does import DuckDB) fails:
    the check above can fail."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "retrieval_pipeline"\n'
        "include_external_packages = true\n\n[[tool.importlinter.contracts]]\n"
        'name = "the warehouse without DuckDB"\ntype = "forbidden"\n'
        'source_modules = ["retrieval_pipeline.warehouse"]\nforbidden_modules = ["duckdb"]\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    assert done.returncode != 0
    assert "BROKEN" in done.stdout


def test_pure_modules_load_neither_duckdb_nor_dagster() -> None:
    loaded = _heavy_modules_loaded(PURE_MODULES)
    if loaded:  # name the culprits, one fresh interpreter each
        culprits = [m for m in PURE_MODULES if _heavy_modules_loaded([m])]
        pytest.fail(f"{', '.join(culprits)} load {', '.join(loaded[:5])}")


@pytest.mark.parametrize(
    ("module", "heavy"),
    [("retrieval_pipeline.warehouse.connection", "duckdb"), ("retrieval_pipeline.defs", "dagster")],
)
def test_the_fresh_interpreter_sees_a_heavy_import(module: str, heavy: str) -> None:
    """The probe above finds DuckDB or Dagster where a module does load them."""
    assert heavy in _heavy_modules_loaded([module])


def test_no_module_is_over_600_lines() -> None:
    """The rooms stay small enough to read (issue 21's bound): the longest modules, if any pass."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "retrieval_pipeline").rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}


def test_the_readme_is_a_manual_of_at_most_20_kb_linking_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 20_000
    unlinked = [
        page.name
        for page in sorted((ROOT / "docs").glob("*.md"))
        if f"(docs/{page.name}" not in readme
    ]
    assert unlinked == []
