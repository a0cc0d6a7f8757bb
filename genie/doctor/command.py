"""``genie doctor``'s doing and printing: the machine checks, as a table or JSON."""

from __future__ import annotations

import sys
from pathlib import Path

from genie.errors import GenieError
from genie.i18n import _


def doctor(
    project_dir: Path | None,
    *,
    master_addr: str | None,
    master_port: int | None,
    reach: bool,
    python: str | None,
    as_json: bool,
) -> None:
    """Run every check that applies and print them; CheckFailed when one fails."""
    from genie import doctor as checks
    from genie import ui
    from genie.spec.project import load_project

    ctx = checks.Context(master_addr=master_addr, master_port=master_port, reach=reach)
    ctx.python = python or sys.executable
    if project_dir is not None:
        ctx.spec, ctx.project_dir = load_project(project_dir), project_dir.absolute()
    if reach and ctx.addr is None:
        raise GenieError(_("--reach needs --master-addr, or a multi-node --project"))
    results = checks.run(ctx)
    if as_json:
        import json

        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        ui.doctor(results)
    checks.ensure_passed(results)
