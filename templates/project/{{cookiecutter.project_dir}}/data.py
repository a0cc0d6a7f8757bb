{% set g = cookiecutter._genie %}
{% include "tasks/" ~ g.task ~ "/data.py.j2" %}
