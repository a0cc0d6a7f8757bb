{% set g = cookiecutter._genie %}
{% include "modules/tracking.py.j2" %}
