{% set g = cookiecutter._genie %}
{% include ["frameworks/" ~ g.framework ~ "/test_smoke.py.j2", "tests/test_smoke.py.j2"] %}
