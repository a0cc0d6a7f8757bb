"""genie in Simplified Chinese: the catalogs are complete, current and faithful to their
placeholders; the language is chosen as documented; the real command speaks Chinese; a
Chinese project replays byte for byte and its English README does not depend on the UI."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest
from babel.messages.mofile import read_mo

from genie import i18n
from tests.conftest import ROOT, run_genie, spec_of, tree

spec = importlib.util.spec_from_file_location("i18n_script", ROOT / "scripts" / "i18n.py")
assert spec and spec.loader
catalogs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(catalogs)

DOMAINS = (i18n.DOMAIN, i18n.CLICK_DOMAIN)
ZH = {"LANGUAGE": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "zh_CN.UTF-8"}
PLACEHOLDER = re.compile(r"\{[^{}]*\}|%\(\w+\)[sd]")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CODE = re.compile(r"`[^`]+`")


def cjk(text: str) -> bool:
    return any(unicodedata.east_asian_width(c) == "W" for c in text)


def entries(domain: str):
    for message in catalogs.read(catalogs.po_path("zh", domain)):
        if message.id:
            ids = message.id if isinstance(message.id, tuple) else (message.id,)
            strings = message.string if isinstance(message.string, tuple) else (message.string,)
            yield message, ids, strings


# ---------------------------------------------------------------- the catalogs


def test_the_genie_catalog_holds_exactly_the_messages_in_the_source():
    """Fails when a message was added or changed without `python scripts/i18n.py update`."""
    in_source = {m.id for m in catalogs.extract(i18n.DOMAIN) if m.id}
    in_catalog = {m.id for m, _ids, _strings in entries(i18n.DOMAIN)}
    assert not in_source - in_catalog, "run python scripts/i18n.py update, then translate"
    assert not in_catalog - in_source, "stale messages: run python scripts/i18n.py update"


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_message_has_a_chinese_translation(domain):
    missing = [ids[0] for m, ids, strings in entries(domain) if not all(strings) or m.fuzzy]
    assert not missing, missing[:10]


@pytest.mark.parametrize("domain", DOMAINS)
def test_translations_keep_placeholders_flags_code_and_edge_newlines(domain):
    bad = []
    for _m, ids, strings in entries(domain):
        for text in strings:
            source = ids[0]
            kept = (
                sorted(PLACEHOLDER.findall(source)) == sorted(PLACEHOLDER.findall(text))
                and set(FLAG.findall(source)) <= set(FLAG.findall(text))
                and set(CODE.findall(source)) <= set(CODE.findall(text))
                # line breaks around a message are layout; spaces may go with punctuation
                and source[: len(source) - len(source.lstrip("\n"))]
                == text[: len(text) - len(text.lstrip("\n"))]
                and source[len(source.rstrip("\n")) :] == text[len(text.rstrip("\n")) :]
            )
            if not kept:
                bad.append((source, text))
    assert not bad, bad[:5]


def test_no_message_is_hidden_in_an_f_string():
    """Babel does not look inside f-strings: `f"{_('x')}"` would never be translated."""
    import ast

    hidden = []
    for path in sorted((ROOT / "genie").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", "") in {
                        "_",
                        "ngettext",
                        "gettext",
                    }:
                        hidden.append(f"{path.name}:{node.lineno}")
    assert not hidden, hidden


def test_a_dropped_placeholder_is_caught():
    """The check above can fail: a translation without {field} does not pass it."""
    assert sorted(PLACEHOLDER.findall("{field}: {value!r}")) != sorted(
        PLACEHOLDER.findall("{value!r} 无效")
    )


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_shipped_mo_files_are_compiled_from_the_current_po(domain):
    po = catalogs.po_path("zh", domain)
    with po.with_suffix(".mo").open("rb") as f:
        shipped = {repr(m.id): repr(m.string) for m in read_mo(f) if m.id}
    with io.BytesIO(catalogs.compiled(catalogs.read(po))) as f:
        fresh = {repr(m.id): repr(m.string) for m in read_mo(f) if m.id}
    assert shipped == fresh, "run python scripts/i18n.py compile"


def test_chinese_uses_one_term_for_the_smoke_test():
    texts = [s for _m, _ids, strings in entries(i18n.DOMAIN) for s in strings]
    assert sum("冒烟测试" in t for t in texts) >= 5
    assert not [t for t in texts if "快速验证" in t or "烟雾测试" in t]


# ---------------------------------------------------------------- choosing the language


@pytest.mark.parametrize(
    "argv, environ, expected",
    [
        ([], {}, "en"),
        ([], {"LANG": "zh_CN.UTF-8"}, "zh"),
        ([], {"LANG": "zh_TW.UTF-8"}, "zh"),
        ([], {"LANG": "de_DE.UTF-8"}, "en"),
        ([], {"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
        ([], {"LC_ALL": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "en"),
        ([], {"LANGUAGE": "zh_CN:en", "LC_ALL": "C.UTF-8"}, "zh"),
        ([], {"LANGUAGE": "en", "LANG": "zh_CN.UTF-8"}, "en"),
        ([], {"LANGUAGE": "", "LANG": "zh_CN.UTF-8"}, "zh"),  # empty counts as unset
        (["--lang", "zh", "new"], {"LANG": "C"}, "zh"),
        (["--lang=en", "doctor"], {"LANG": "zh_CN.UTF-8"}, "en"),
        (["--lang", "fr"], {"LANG": "zh_CN.UTF-8"}, "zh"),  # click rejects fr
        (["new", "x", "--lang", "zh"], {}, "en"),  # a subcommand's argument, not genie's
        (["convert", "s.py", "--check-args", "--lang zh"], {}, "en"),
    ],
)
def test_language_precedence(argv, environ, expected):
    assert i18n.language_from(argv, environ) == expected


def test_help_under_chinese_is_chinese_and_lang_en_wins_over_the_environment():
    zh = run_genie("--help", **ZH)
    assert zh.returncode == 0 and "用法" in zh.stdout and cjk(zh.stdout)
    assert "--lang" in zh.stdout and "--version" in zh.stdout
    en = run_genie("--lang", "en", "--help", **ZH)
    assert en.returncode == 0 and "Usage:" in en.stdout and not cjk(en.stdout)
    flagged = run_genie("--lang", "zh", "new", "--help")
    assert flagged.returncode == 0 and cjk(flagged.stdout) and "--gpus-per-node" in flagged.stdout


def test_an_unknown_language_is_refused_in_one_line():
    result = run_genie("--lang", "fr", "new", "--help")
    assert result.returncode == 2 and "--lang" in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------- the real command in Chinese


def test_an_invalid_flag_under_lang_zh_is_one_chinese_line_naming_the_field(tmp_path):
    result = run_genie("--lang", "zh", "new", "demo", "--yes", "--nodes", "0", cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "--nodes" in lines[0] and "4096" in lines[0] and cjk(lines[0])
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_click_errors_under_lang_zh_are_chinese_and_still_suggest(tmp_path):
    result = run_genie("--lang", "zh", "new", "demo", "--gpu", "3", cwd=tmp_path)
    assert result.returncode == 2 and cjk(result.stderr), result.stderr
    assert "--gpus-per-node" in result.stderr and list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def chinese_project(tmp_path_factory):
    """One Chinese project, generated and smoke-tested for real under LANG=zh_CN.UTF-8."""
    where = tmp_path_factory.mktemp("zh")
    result = run_genie("new", "demo", "--yes", "--scheduler", "none", cwd=where, **ZH)
    return where / "demo", result


@pytest.mark.e2e
def test_a_chinese_genie_new_speaks_chinese_from_summary_to_verdict(chinese_project):
    project, result = chinese_project
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for chinese in ("全局批大小", "启动", "冒烟测试", "结论", "通过"):
        assert chinese in out, chinese
    assert "torchrun --standalone --nproc_per_node=2 train.py" in out  # commands stay commands
    readme = (project / "README.zh-CN.md").read_text(encoding="utf-8")
    assert cjk(readme) and "bash launch/single_node.sh --smoke" in readme
    assert "[English](README.md)" in readme
    assert not cjk((project / "README.md").read_text(encoding="utf-8"))
    assert not any(cjk(p.read_text()) for p in project.rglob("*.py"))  # code stays English
    assert 'docs_lang: "zh"' in (project / ".genie.yml").read_text()


def test_a_replay_of_a_chinese_project_in_english_is_byte_for_byte_the_same(
    chinese_project, tmp_path
):
    project, _result = chinese_project
    replay = run_genie(
        "new", "again", "--yes", "--no-smoke", "--answers", str(project / ".genie.yml"),
        cwd=tmp_path, LANGUAGE="en",
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    assert tree(tmp_path / "again") == tree(project)


def test_project_files_do_not_depend_on_genie_s_language(tmp_path):
    """An English project generated by a Chinese genie equals one generated in English."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    zh = run_genie("new", "p", "--yes", "--no-smoke", "--docs-lang", "en", cwd=tmp_path / "a", **ZH)
    en = run_genie("new", "p", "--yes", "--no-smoke", cwd=tmp_path / "b", LANGUAGE="en")
    assert zh.returncode == 0 and en.returncode == 0, zh.stderr + en.stderr
    assert cjk(zh.stdout) and not cjk(en.stdout)
    assert tree(tmp_path / "a" / "p") == tree(tmp_path / "b" / "p")


# ---------------------------------------------------------------- wide characters


def test_chinese_tables_line_up_within_80_columns(monkeypatch):
    """Summary and verdict tables in Chinese: every row within 80 cells, values aligned."""
    from rich.cells import cell_len
    from rich.console import Console

    from genie import ui
    from genie.detect import Machine
    from genie.smoke.plan import SmokePlan, SmokeResult

    out = io.StringIO()
    monkeypatch.setattr(ui, "console", lambda: Console(file=out, width=80, no_color=True))
    i18n.activate("zh")
    try:
        machine = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
        project = spec_of(machine, name="demo", scheduler="none")
        ui.summary(project)
        plan = SmokePlan((), {}, 2, "gloo", "cpu", "fp32", ("CPU: NCCL untested",))
        report = {"steps": 6, "first_loss": 2.3, "last_loss": 1.9, "params_in_sync": True}
        ui.verdict(SmokeResult(plan, 0, 12.5, report=report))
    finally:
        i18n.activate("en")
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert any(cjk(line) for line in lines)
    assert all(cell_len(line) <= 80 for line in lines), [x for x in lines if cell_len(x) > 80]
    # every row of the summary puts its value in the same cell column
    rows = [line for line in lines if "│" not in line and "=" not in line and "  " in line.strip()]
    value_columns = {cell_len(re.match(r"\s*\S.*?\s{2,}", row).group()) for row in rows}
    assert len(rows) > 10 and len(value_columns) == 1, rows
    # the verdict's rows end in the same cell column (its right border)
    boxed = [line for line in lines if line.startswith("│")]
    assert boxed and len({cell_len(line) for line in boxed}) == 1, boxed


def test_cjk_width_is_counted_as_two_cells():
    from rich.cells import cell_len

    assert cell_len("全局批大小") == 10
    assert os.environ.get("LANGUAGE") == "en"  # the suite's default (conftest)
    assert sys.modules["genie.i18n"].current() == "en"


def test_genie_doctor_in_chinese_lines_up_within_80_columns():
    from rich.cells import cell_len

    result = run_genie("--lang", "zh", "doctor", COLUMNS="80")
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    assert "检查项" in result.stdout and "解决方法" in result.stdout and "通过" in result.stdout
    assert all(cell_len(line) <= 80 for line in lines), [x for x in lines if cell_len(x) > 80]
    boxed = [line for line in lines if line.startswith(("│", "┃"))]
    assert boxed and len({cell_len(line) for line in boxed}) == 1  # one right border


def test_genie_convert_reports_in_chinese_but_writes_the_same_english_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes((ROOT / "tests" / "convert_corpus" / "custom_sampler.py").read_bytes())
    zh = run_genie("--lang", "zh", "convert", "train.py", "--no-check", "--yes", "-o", "zh.py",
                   "--allow-todo", cwd=tmp_path)  # fmt: skip
    en = run_genie("--lang", "en", "convert", "train.py", "--no-check", "--yes", "-o", "en.py",
                   "--allow-todo", cwd=tmp_path)  # fmt: skip
    assert zh.returncode == 0 and en.returncode == 0, zh.stderr + en.stderr
    assert "TODO 第 " in zh.stdout  # the report is Chinese ...
    converted = (tmp_path / "zh.py").read_text()
    assert "# genie: TODO: train_loader has its own sampler" in converted  # ... the code is not
    assert converted == (tmp_path / "en.py").read_text()


@pytest.mark.parametrize("args", [["--help"], ["new", "--help"], ["doctor", "--help"]])
def test_chinese_help_fits_80_columns_and_keeps_its_columns(args):
    from genie.cjk import cells

    result = run_genie("--lang", "zh", *args, COLUMNS="80")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and cjk(result.stdout)
    assert all(cells(line) <= 80 for line in lines), [x for x in lines if cells(x) > 80]
    assert not [x for x in lines if x.strip()[:1] in set("，。：；？！）")]  # no line opens so
    # every option's description starts in one column, whatever the width of its metavar
    described = [x for x in lines if re.match(r"  -", x) and re.search(r"\S  +\S", x.strip())]
    starts = {cells(x[: re.match(r"  -.*?\S  +\S", x).end() - 1]) for x in described}
    assert len(starts) == 1, described


def test_cells_counts_wide_characters_twice_and_ansi_not_at_all():
    from genie.cjk import cells

    assert cells("GPU 数") == 6 and cells("\033[1m节点\033[0m") == 4 and cells("") == 0


def readme_languages() -> list[tuple[Path, Path]]:
    """Each file of README sentences in English beside its Chinese one: the shared sentences
    and every framework's."""
    templates = ROOT / "templates" / "project" / "templates"
    pairs = [(templates / "readme" / "en.j2", templates / "readme" / "zh.j2")]
    for english in sorted(templates.glob("frameworks/*/readme.en.j2")):
        pairs.append((english, english.with_name("readme.zh.j2")))
    return pairs


def macros(text: str) -> list[str]:
    return re.findall(r"{%-?\s*macro\s+(\w+\([^)]*\))", text)


@pytest.mark.parametrize("english, chinese", readme_languages(), ids=lambda p: p.parent.name)
def test_the_chinese_readme_says_what_the_english_one_says(english, chinese):
    """README.md and README.zh-CN.md share one structure (readme/README.md.j2, where every
    condition and loop is): each language file holds the same paragraphs, as macros of the
    same names and parameters, and decides nothing itself. Change one, change the other."""
    english_text = english.read_text(encoding="utf-8")
    chinese_text = chinese.read_text(encoding="utf-8")
    assert macros(english_text) and macros(chinese_text) == macros(english_text)
    for text in (english_text, chinese_text):
        assert not re.search(r"{%-?\s*(if|for)\b", text)


def test_the_language_check_can_fail():
    assert macros("{% macro a(x) %}{% endmacro %}{% macro b() %}") == ["a(x)", "b()"]


def test_every_paragraph_of_the_structure_exists_in_each_language(tmp_path):
    """A macro the structure calls and a language lacks would fail the render: render the
    variants with the most branches in Chinese (the render raises on an undefined macro)."""
    from genie.detect import Machine
    from genie.generate import engine
    from genie.spec import build_spec

    machine = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0.cluster")
    for raw in (
        {"nodes": 2, "master_addr": "gpu-01", "scheduler": "slurm", "framework": "lightning"},
        {"scheduler": "kubernetes", "nodes": 2, "strategy": "fsdp"},
        {"framework": "dp", "task": "cv", "precision": "fp16", "gpus_per_node": 2},
        {"framework": "hf", "task": "nlp", "strategy": "fsdp", "gpus_per_node": 8},
    ):
        files = engine.render(build_spec({"name": "p", "docs_lang": "zh", **raw}, machine))
        english, chinese = files["README.md"].decode(), files["README.zh-CN.md"].decode()
        sections = [line for line in english.splitlines() if line.startswith("#")]
        assert len([line for line in chinese.splitlines() if line.startswith("#")]) == len(sections)


def test_lang_after_the_command_says_where_it_goes(tmp_path):
    result = run_genie("new", "demo", "--lang", "zh", cwd=tmp_path)
    assert result.returncode == 2 and list(tmp_path.iterdir()) == []
    assert result.stderr.strip().splitlines() == [
        "error: --lang is genie's own option: put it before the command, e.g. "
        "genie --lang zh new ..."
    ]
