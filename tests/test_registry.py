"""Frameworks and tasks are declared once (genie/registry.py) and read everywhere else."""

from __future__ import annotations

import ast

from genie import registry

from .conftest import ROOT


def dict_keys_in(path) -> set[str]:
    """String keys of every dict display in a module."""
    tree = ast.parse(path.read_text())
    return {
        key.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }


def test_no_module_but_the_registry_keys_a_table_by_framework_or_task():
    names = set(registry.FRAMEWORKS) | set(registry.TASKS)
    offenders = {
        str(path.relative_to(ROOT)): sorted(dict_keys_in(path) & names - {"ddp"})
        for path in (ROOT / "genie").rglob("*.py")
        if path.name != "registry.py"
    }
    # "ddp" is also a strategy name; "lightning" keys compat's library lines (a package)
    allowed = {"genie/compat/libraries.py": ["lightning"]}
    assert {k: v for k, v in offenders.items() if v and allowed.get(k) != v} == {}


def test_every_framework_and_task_entry_is_complete_and_rendered(cpu_machine):
    from genie.generate import engine
    from genie.spec import build_spec

    for key, framework in registry.FRAMEWORKS.items():
        assert framework.key == key and framework.title and framework.summary
        files = engine.render(build_spec({"name": "p", "framework": key}, cpu_machine))
        for name in framework.modules:
            module = registry.MODULES[name]  # declared, with its purpose
            assert module.name == name and module.purpose
            # the default task (custom) is not a language model
            assert (name in files) is not (module.sharded or module.language_model), (key, name)
    for key, task in registry.TASKS.items():
        assert task.key == key and task.title
        if task.language_model:  # its own modules are rendered for it
            framework = (task.frameworks or tuple(registry.FRAMEWORKS))[0]
            spec = build_spec({"name": "p", "framework": framework, "task": key}, cpu_machine)
            files = engine.render(spec)
            for name in registry.FRAMEWORKS[framework].modules:
                if registry.MODULES[name].language_model:
                    assert name in files, (key, name)


def test_every_module_a_framework_lists_has_a_template_for_it():
    templates = ROOT / "templates" / "project" / "templates"
    for key, framework in registry.FRAMEWORKS.items():
        for name in framework.modules:
            own = templates / "frameworks" / key / f"{name}.j2"
            assert own.is_file() or (templates / "modules" / f"{name}.j2").is_file(), (key, name)
