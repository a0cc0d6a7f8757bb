{% set g = cookiecutter._genie %}
{% include "modules/smoke_check.py.j2" %}
