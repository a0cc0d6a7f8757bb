{% set g = cookiecutter._genie %}
{% include "modules/dist_utils.py.j2" %}
