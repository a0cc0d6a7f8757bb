{% set g = cookiecutter._genie %}
{% include "modules/evaluation.py.j2" %}
