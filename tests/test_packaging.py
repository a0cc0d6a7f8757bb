"""`pip install .` (not editable) must be able to generate: the wheel carries the templates."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from .conftest import ROOT


def test_the_wheel_ships_every_template_file_and_catalog_inside_the_package(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [wheel] = tmp_path.glob("genie*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    templates = [p for p in (ROOT / "templates").rglob("*") if p.is_file()]
    assert templates
    for path in templates:
        assert f"genie/{path.relative_to(ROOT).as_posix()}" in shipped, path
    assert "genie/cli/__init__.py" in shipped and "genie/__main__.py" in shipped
    catalogs = [p for p in (ROOT / "genie" / "locale").rglob("*.mo")]
    assert len(catalogs) == 2  # genie's and click's messages in Chinese
    for path in catalogs:
        assert path.relative_to(ROOT).as_posix() in shipped, path
