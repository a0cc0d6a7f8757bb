{% set g = cookiecutter._genie %}
{% include "modules/checkpoint.py.j2" %}
