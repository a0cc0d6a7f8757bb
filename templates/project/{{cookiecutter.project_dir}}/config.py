{% set g = cookiecutter._genie %}
{% include "modules/config.py.j2" %}
